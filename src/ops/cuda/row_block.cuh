// Block-per-row kernels of the memory-bound row ops (rms_norm_modulate, rms_norm_modulate_fp8, quantize): a
// block takes one row of 16-byte packs, each thread keeping its `np` packs in registers so that all of its
// loads are in flight at once; block-wide reductions give the row's statistics; and the per-row fp8
// encoding of quantize.cu (the same scale and rounding, so the codes match it and the CPU bit for bit).
#pragma once
#include <cuda_fp8.h>

#include <cstdlib>

#include "ops/cuda/common.h"

namespace ernie::cuda {

// The most threads of a row block; its kernels are compiled for it (__launch_bounds__), so that even eight
// packs per thread fit the registers.
constexpr int kRowThreads = 512;

// ERNIE_ROW_THREADS=128|256|512 (read once) fixes the threads a row block prefers, for measuring; 0 when unset.
inline int forced_row_threads() {
  static const int t = [] {
    const char* e = std::getenv("ERNIE_ROW_THREADS");
    const int v = e ? std::atoi(e) : 0;
    return v == 128 || v == 256 || v == 512 ? v : 0;
  }();
  return t;
}

// How a row of `cp` packs is spread over a block: `threads` (a multiple of 32) threads with `np` packs each
// (1, 2, 4 or 8); np = 0 when the row is empty or longer than 8 · kRowThreads packs (callers fall back).
// The smallest block that holds the row in at most 4 packs per thread: small blocks keep more rows in
// flight per SM, and more packs per thread cost registers. Measured on the H200 (CudaPerf.
// DISABLED_FusedFp8Producers, 4296 rows): rows of 4096 bf16 with 128 threads x 4 packs against 512 x 1:
// rms_norm_modulate_fp8 35.6 vs 50.5 us, quantize 16.6 vs 23.7 us. (geglu_fp8's rows of 12288 did better
// staged in shared memory: elementwise.cu.)
struct RowBlock {
  int threads = 0, np = 0;
};
inline RowBlock row_block(int64_t cp) {
  if (cp <= 0 || cp > int64_t(8) * kRowThreads) return {};
  const int forced = forced_row_threads();
  int pref = forced ? forced : kRowThreads;
  if (!forced)
    for (int t : {128, 256})
      if (cp <= int64_t(t) * 4) {
        pref = t;
        break;
      }
  int np = 8;
  for (int n : {1, 2, 4, 8})
    if (cp <= int64_t(pref) * n) {
      np = n;
      break;
    }
  const int t = int((cp + np - 1) / np);
  return {(t + 31) / 32 * 32, np};
}

// The fp8 codes of one 16-byte pack of T (8 bytes for bf16, 4 for f32), stored as one access.
template <class T>
struct alignas(kPack<T>) Codes {
  uint8_t v[kPack<T>];
};

#ifdef __CUDACC__
struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// op-reduction of v over the block (blockDim.x threads, a multiple of 32, at most 1024); every thread gets
// it. The order is fixed (lanes by xor, then warps in order), so equal inputs give equal results.
template <class Op>
__device__ __forceinline__ float block_reduce(float v, Op op) {
  __shared__ float part[32];
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
  __syncthreads();
  v = part[0];
  for (int w = 1; w < int(blockDim.x / 32); ++w) v = op(v, part[w]);
  __syncthreads();  // `part` may be written by the next reduction
  return v;
}

// quantize()'s scale of a row with maximum magnitude amax for codes up to qmax (1 for an all-zero row), the
// fp8 one, and the code of one value.
__device__ __forceinline__ float row_scale(float amax, float qmax) { return amax > 0.f ? __fdiv_rn(amax, qmax) : 1.f; }
__device__ __forceinline__ float fp8_row_scale(float amax) { return row_scale(amax, kFp8E4m3Max); }
__device__ __forceinline__ uint8_t fp8_code(float v, float inv_scale) {  // e4m3, nearest even, saturating
  return uint8_t(__nv_cvt_float_to_fp8(__fmul_rn(v, inv_scale), __NV_SATFINITE, __NV_E4M3));
}

// The largest magnitude in a row held in registers across the block: the thread's np packs `r` (pack
// i = threadIdx.x + j·blockDim.x, present while i < cp). Every thread of the block calls it.
template <class T, int NP>
__device__ __forceinline__ float block_amax(const Pack<T> (&r)[NP], int cp) {
  float amax = 0.f;
#pragma unroll
  for (int j = 0; j < NP; ++j)
    if (threadIdx.x + j * blockDim.x < cp)
#pragma unroll
      for (int e = 0; e < kPack<T>; ++e) amax = fmaxf(amax, fabsf(to_f(r[j].v[e])));
  return block_reduce(amax, MaxOp());
}

// The end of an fp8 producer: the thread's np packs `r` of row `row` (pack i = threadIdx.x + j·blockDim.x,
// present while i < cp) quantized with the row's scale into q [rows, cp] packs and qs [rows]. `fixed`: a
// static scale (*fixed) for every row instead.
template <class T, int NP>
__device__ __forceinline__ void store_fp8_row(const Pack<T> (&r)[NP], int64_t row, int cp, Codes<T>* __restrict__ q,
                                              float* __restrict__ qs, const float* __restrict__ fixed) {
  const float s = fixed ? *fixed : fp8_row_scale(block_amax(r, cp));
  if (threadIdx.x == 0) qs[row] = s;
  const float inv = __frcp_rn(s);
#pragma unroll
  for (int j = 0; j < NP; ++j) {
    const int i = threadIdx.x + j * blockDim.x;
    if (i >= cp) continue;
    Codes<T> c;
#pragma unroll
    for (int e = 0; e < kPack<T>; ++e) c.v[e] = fp8_code(to_f(r[j].v[e]), inv);
    q[row * cp + i] = c;
  }
}
#endif

// Runs `body` with the compile-time int NP bound to rb.np (1, 2, 4 or 8).
#define ERNIE_DISPATCH_NP(np_value, ...)           \
  do {                                             \
    switch (np_value) {                            \
      case 1: { constexpr int NP = 1; __VA_ARGS__; } break; \
      case 2: { constexpr int NP = 2; __VA_ARGS__; } break; \
      case 4: { constexpr int NP = 4; __VA_ARGS__; } break; \
      default: { constexpr int NP = 8; __VA_ARGS__; } break; \
    }                                              \
  } while (0)

}  // namespace ernie::cuda
