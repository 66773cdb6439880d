// Flash attention for Hopper (sm_90a): bf16, head_dim 128, no causal mask (the DiT's joint attention).
// A block of two warpgroups owns 128 query rows of one (batch, head); each warpgroup 64 rows. Key/value
// tiles of 128 rows stream through shared memory in two stages (cp.async) in the 128-byte swizzle layout
// wgmma reads. S = Q·Kᵀ is one m64n128 wgmma chain from shared memory; the online softmax runs on its
// accumulators in the log2 domain; P stays in registers as the A operand of O += P·V (V read MN-major).
// The two warpgroups interleave on the SM: one does softmax while the other's wgmma runs.
// Masks: per-batch kv_len (keys past it are zero-filled and excluded).
#include <cuda_bf16.h>
#include <cuda_pipeline.h>

#include <cmath>

#include "ops/cuda/attention_internal.h"
#include "ops/cuda/common.h"
#include "ops/cuda/wgmma_sm90.cuh"

namespace ernie::cuda::attn {

namespace {

using bf16 = __nv_bfloat16;
constexpr int kD = 128, kBr = 128, kBc = 128, kThreads = 256;
constexpr int kTileBytes = 128 * kD * 2;                   // one 128x128 bf16 tile
constexpr int kSmem = (kBr + 4 * kBc) * kD * 2 + 1024;      // Q, 2 x K, 2 x V, alignment slack

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// A [128 rows, 128] bf16 tile as two 64-column halves, each [128 rows][128 bytes] in the 128-byte swizzle:
// byte offset of 16-byte chunk c (0..15) of row r.
__device__ __forceinline__ int sw128(int r, int c) { return (c / 8) * (128 * 128) + r * 128 + (((c % 8) ^ (r % 8)) * 16); }

// Rows [row0, row0 + 128) of a head slice (row stride `stride` elements) into a tile; rows >= `rows`
// are zero-filled.
__device__ __forceinline__ void load_tile(unsigned char* tile, const bf16* g, int64_t stride, int row0, int rows) {
  for (int i = threadIdx.x; i < 128 * 16; i += kThreads) {
    const int r = i / 16, c = i % 16;
    unsigned char* dst = tile + sw128(r, c);
    if (row0 + r < rows) __pipeline_memcpy_async(dst, g + int64_t(row0 + r) * stride + c * 8, 16);
    else *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
  }
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

#endif

__global__ void __launch_bounds__(kThreads, 1) wgmma_flash_kernel(const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  unsigned char* sQ = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  unsigned char* sK = sQ + kTileBytes;      // two stages
  unsigned char* sV = sK + 2 * kTileBytes;  // two stages

  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kBr;
  const int kh = h / (p.Hq / p.Hkv);
  const int wg = threadIdx.x / 128, lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t qs = int64_t(p.Hq) * kD, ks = int64_t(p.Hkv) * kD;
  const bf16* Q = static_cast<const bf16*>(p.q) + int64_t(b) * p.Sq * qs + int64_t(h) * kD;
  const bf16* K = static_cast<const bf16*>(p.k) + int64_t(b) * p.Sk * ks + int64_t(kh) * kD;
  const bf16* V = static_cast<const bf16*>(p.v) + int64_t(b) * p.Sk * ks + int64_t(kh) * kD;
  bf16* O = static_cast<bf16*>(p.o) + int64_t(b) * p.Sq * qs + int64_t(h) * kD;

  const int kv_len = p.kv_len[b];
  const int n_tiles = (kv_len + kBc - 1) / kBc;

  load_tile(sQ, Q, qs, q0, p.Sq);
  if (n_tiles > 0) {
    load_tile(sK, K, ks, 0, kv_len);
    load_tile(sV, V, ks, 0, kv_len);
  }
  __pipeline_commit();

  // Accumulator layout of m64nN (per warp 16 rows): d[4n + 2i + j] is row g + 8i, column 8n + 2t + j.
  float o[64], s[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const float sl2 = p.scale * 1.4426950408889634f;

  for (int j = 0; j < n_tiles; ++j) {
    const int st = j & 1;
    if (j + 1 < n_tiles) {
      load_tile(sK + (st ^ 1) * kTileBytes, K, ks, (j + 1) * kBc, kv_len);
      load_tile(sV + (st ^ 1) * kTileBytes, V, ks, (j + 1) * kBc, kv_len);
    }
    __pipeline_commit();
    __pipeline_wait_prior(1);
    wgmma::fence_proxy_async();
    __syncthreads();

    // S = Q Kᵀ over head_dim in 8 steps of 16 (4 per 64-column half of the swizzled tiles).
    const unsigned char* kt = sK + st * kTileBytes;
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      const int half = kk / 4, col = (kk % 4) * 32;
      const uint64_t da = wgmma::desc_sw128(sQ + half * 128 * 128 + wg * 64 * 128 + col, 16, 1024);
      const uint64_t db = wgmma::desc_sw128(kt + half * 128 * 128 + col, 16, 1024);
      wgmma::mma_ss_m64n128k16(s, da, db, kk > 0);
    }
    wgmma::commit();
    wgmma::wait_all();
    wgmma::fence_regs(s);

    // Mask, then online softmax in the log2 domain (each row's 128 keys live in the 4 threads of a quad).
    const int key0 = j * kBc;
    const bool masked = key0 + kBc > kv_len;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < kBc / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float v = s[4 * n + 2 * r + e] * sl2;
          if (masked && key0 + n * 8 + 2 * t + e >= kv_len) v = -INFINITY;
          s[4 * n + 2 * r + e] = v;
          mx = fmaxf(mx, v);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[r], mx);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float corr = exp2f(m[r] - m_use);
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < kBc / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pv = exp2f(s[4 * n + 2 * r + e] - m_use);
          s[4 * n + 2 * r + e] = pv;
          sum += pv;
        }
      l[r] = l[r] * corr + sum;
      m[r] = m_new;
#pragma unroll
      for (int n = 0; n < kD / 8; ++n) {
        o[4 * n + 2 * r] *= corr;
        o[4 * n + 2 * r + 1] *= corr;
      }
    }

    // O += P V over the 128 keys in 8 steps of 16; V's 16-key slabs are 2 KB apart in each half.
    // P is packed to bf16 A fragments before the chain starts, so no register changes inside it.
    uint32_t pa[kBc / 16][4];
#pragma unroll
    for (int kk = 0; kk < kBc / 16; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) pa[kk][i] = pack_bf16(s[8 * kk + 2 * i], s[8 * kk + 2 * i + 1]);
    const unsigned char* vt = sV + st * kTileBytes;
    wgmma::fence_regs(o);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kBc / 16; ++kk)
      wgmma::mma_rs_m64n128k16_tb(o, pa[kk], wgmma::desc_sw128(vt + kk * 16 * 128, 128 * 128, 1024));
    wgmma::commit();
    wgmma::wait_all();
    wgmma::fence_regs(o);
    __syncthreads();  // the next iteration's loads overwrite this stage
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = l[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    const int row = q0 + wg * 64 + warp * 16 + g + 8 * r;
    if (row >= p.Sq) continue;
    bf16* orow = O + int64_t(row) * qs;
#pragma unroll
    for (int n = 0; n < kD / 8; ++n)
      *reinterpret_cast<__nv_bfloat162*>(orow + n * 8 + 2 * t) =
          __floats2bfloat162_rn(o[4 * n + 2 * r] * inv, o[4 * n + 2 * r + 1] * inv);
  }
#else
  __trap();  // built only as sm_90a machine code; the dispatcher checks the device first
#endif
}

}  // namespace

bool wgmma_supported(int D, bool causal, int device) {
  if (D != kD || causal) return false;
  int major = 0, minor = 0;
  ERNIE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  ERNIE_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major == 9 && minor == 0;  // sm_90a machine code runs on compute capability 9.0 only
}

void flash_wgmma(const Params& p, cudaStream_t st) {
  static bool configured = [] {
    ERNIE_CUDA_CHECK(cudaFuncSetAttribute(wgmma_flash_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    return true;
  }();
  (void)configured;
  const dim3 grid(unsigned((p.Sq + kBr - 1) / kBr), unsigned(p.Hq), unsigned(p.B));
  wgmma_flash_kernel<<<grid, kThreads, kSmem, st>>>(p);
  ERNIE_CUDA_LAUNCH("attention (wgmma)");
}

}  // namespace ernie::cuda::attn
