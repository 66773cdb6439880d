// Flash attention for Hopper (sm_90a): bf16, head_dim 128, no causal mask (the DiT's joint attention).
// A block owns 128 query rows of one (batch, head): a producer warpgroup (one thread of it) brings Q and the 128-key K/V tiles into
// shared memory with the tensor memory accelerator (TMA), in the 128-byte swizzle wgmma reads (kStages
// stages, "full" and "empty" mbarriers per stage; rows past the tensor are zero-filled), and two consumer
// warpgroups of 64 rows each compute. Per tile j a consumer issues S_j = Q·K_jᵀ (one m64n128 wgmma chain
// from shared memory) and the previous tile's O += P_j-1·V_j-1 (P in registers as the A operand, V read
// MN-major), then runs the online softmax (log2 domain) on S_j while the tensor cores work. The two
// warpgroups take turns issuing (named barriers: "ping-pong"), so one's softmax overlaps the other's MMAs.
// Measured on the H200 (S 4296, 32 heads): 545 TFLOP/s at batch 1, 582 at batch 2; without the ping-pong
// 450 / 479, with three stages instead of two no faster.
// Masks: per-batch kv_len.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cudaTypedefs.h>

#include <cmath>

#include "ops/cuda/attention_internal.h"
#include "ops/cuda/common.h"
#include "ops/cuda/wgmma_sm90.cuh"

namespace ernie::cuda::attn {

namespace {

using bf16 = __nv_bfloat16;
constexpr int kD = 128, kBr = 128, kBc = 128;
constexpr int kConsumers = 256, kThreads = kConsumers + 128;  // two consumer warpgroups, one producer
constexpr int kTileBytes = kBc * kD * 2;                     // one 128x128 bf16 tile: two 64-column halves
constexpr int kHalfBytes = kTileBytes / 2;                   // [128 rows][128 bytes]: one TMA box
constexpr int kStages = 2;
constexpr int kSmem = kTileBytes + 2 * kStages * kTileBytes + 1024;  // Q, K and V stages, alignment slack

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

#endif

__global__ void __launch_bounds__(kThreads, 1)
    wgmma_flash_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                       const __grid_constant__ CUtensorMap tv, const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  // full: the stage's TMA bytes arrived (1 arrival + bytes); empty: every consumer thread is done with it.
  __shared__ uint64_t q_full, k_full[kStages], v_full[kStages], k_empty[kStages], v_empty[kStages];
  unsigned char* sQ = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  unsigned char* sK = sQ + kTileBytes;
  unsigned char* sV = sK + kStages * kTileBytes;

  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kBr;
  const int kh = h / (p.Hq / p.Hkv);
  const int kv_len = p.kv_len[b];
  const int n_tiles = (kv_len + kBc - 1) / kBc;
  if (threadIdx.x == 0) {
    wgmma::mbar_init(&q_full, 1);
    for (int s = 0; s < kStages; ++s) {
      wgmma::mbar_init(&k_full[s], 1);
      wgmma::mbar_init(&v_full[s], 1);
      wgmma::mbar_init(&k_empty[s], kConsumers);
      wgmma::mbar_init(&v_empty[s], kConsumers);
    }
  }
  __syncthreads();

  // Warpgroup index, made visibly warp-uniform for the compiler (wgmma must not sit in divergent code).
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);
  if (wg == 2) {  // the producer: registers handed to the consumers, one thread issues every load
    wgmma::regs_dealloc<24>();
    if (threadIdx.x == kConsumers && n_tiles > 0) {
      wgmma::mbar_expect_tx(&q_full, 2 * kHalfBytes);
      for (int half = 0; half < 2; ++half) wgmma::tma_load_4d(sQ + half * kHalfBytes, &tq, &q_full, half * 64, q0, h, b);
      for (int j = 0; j < n_tiles; ++j) {
        const int s = j % kStages;
        const uint32_t round = uint32_t(j / kStages);
        if (j >= kStages) wgmma::mbar_wait(&k_empty[s], (round - 1) & 1);
        wgmma::mbar_expect_tx(&k_full[s], 2 * kHalfBytes);
        for (int half = 0; half < 2; ++half)
          wgmma::tma_load_4d(sK + s * kTileBytes + half * kHalfBytes, &tk, &k_full[s], half * 64, j * kBc, kh, b);
        if (j >= kStages) wgmma::mbar_wait(&v_empty[s], (round - 1) & 1);
        wgmma::mbar_expect_tx(&v_full[s], 2 * kHalfBytes);
        for (int half = 0; half < 2; ++half)
          wgmma::tma_load_4d(sV + s * kTileBytes + half * kHalfBytes, &tv, &v_full[s], half * 64, j * kBc, kh, b);
      }
    }
    return;
  }
  wgmma::regs_alloc<240>();

  const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t qs = int64_t(p.Hq) * kD;
  bf16* O = static_cast<bf16*>(p.o) + int64_t(b) * p.Sq * qs + int64_t(h) * kD;
  // Ping-pong: warpgroup w issues its MMAs after waiting on named barrier 1 + w, then lets the other one
  // go (arrives on 2 - w). Warpgroup 1 lets warpgroup 0 start, and skips its last hand-over so that every
  // arrival is matched.
  if (wg == 1 && n_tiles > 0) wgmma::named_arrive(1, kConsumers);

  // Accumulator layout of m64nN (per warp 16 rows): d[4n + 2i + j] is row g + 8i, column 8n + 2t + j.
  float o[64], s[64];
  uint32_t pa[kBc / 16][4];  // P_j-1 as bf16 A fragments (m16n8k16 layout, one per 16 keys)
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const float sl2 = p.scale * 1.4426950408889634f;
  if (n_tiles > 0) wgmma::mbar_wait(&q_full, 0);

  for (int j = 0; j < n_tiles; ++j) {
    const int st = j % kStages, pst = (j + kStages - 1) % kStages;
    wgmma::mbar_wait(&k_full[st], uint32_t(j / kStages) & 1);
    wgmma::named_sync(1 + wg, kConsumers);

    // S_j = Q K_jᵀ over head_dim in 8 steps of 16 (4 per 64-column half of the swizzled tiles), then
    // O += P_j-1 V_j-1 (keys in steps of 16; V's 16-key slabs are 2 KB apart in each half), both async.
    const unsigned char* kt = sK + st * kTileBytes;
    wgmma::fence_regs(o);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      const int half = kk / 4, col = (kk % 4) * 32;
      const uint64_t da = wgmma::desc_sw128(sQ + half * 128 * 128 + wg * 64 * 128 + col, 16, 1024);
      const uint64_t db = wgmma::desc_sw128(kt + half * 128 * 128 + col, 16, 1024);
      wgmma::mma_ss_m64n128k16(s, da, db, kk > 0);
    }
    wgmma::commit();
    if (j > 0) {
      wgmma::mbar_wait(&v_full[pst], uint32_t((j - 1) / kStages) & 1);
      const unsigned char* vt = sV + pst * kTileBytes;
#pragma unroll
      for (int kk = 0; kk < kBc / 16; ++kk)
        wgmma::mma_rs_m64n128k16_tb(o, pa[kk], wgmma::desc_sw128(vt + kk * 16 * 128, 128 * 128, 1024));
    }
    wgmma::commit();
    if (!(wg == 1 && j == n_tiles - 1)) wgmma::named_arrive(2 - wg, kConsumers);
    wgmma::wait<1>();  // S_j is ready (K_j is free again); P_j-1 V_j-1 may still run
    wgmma::fence_regs(s);
    wgmma::mbar_arrive(&k_empty[st]);

    // Mask, then online softmax in the log2 domain (each row's 128 keys live in the 4 threads of a quad):
    // m is the running maximum of scale·log2(e)·s, p = 2^(scale·log2(e)·s - m).
    const int key0 = j * kBc;
    const bool masked = key0 + kBc > kv_len;
    float corr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < kBc / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& v = s[4 * n + 2 * r + e];
          if (masked && key0 + n * 8 + 2 * t + e >= kv_len) v = -INFINITY;
          mx = fmaxf(mx, v);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[r], mx * sl2);  // sl2 > 0
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      corr[r] = wgmma::ex2(m[r] - m_use);
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < kBc / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& v = s[4 * n + 2 * r + e];
          v = wgmma::ex2(fmaf(v, sl2, -m_use));
          sum += v;
        }
      l[r] = l[r] * corr[r] + sum;
      m[r] = m_new;
    }

    wgmma::wait<0>();  // O now holds P_j-1 V_j-1 (V_j-1 is free again): rescale it to the new maxima, hand P_j on
    wgmma::fence_regs(o);
    if (j > 0) wgmma::mbar_arrive(&v_empty[pst]);
#pragma unroll
    for (int n = 0; n < kD / 8; ++n)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        o[4 * n + 2 * r] *= corr[r];
        o[4 * n + 2 * r + 1] *= corr[r];
      }
#pragma unroll
    for (int kk = 0; kk < kBc / 16; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) pa[kk][i] = pack_bf16(s[8 * kk + 2 * i], s[8 * kk + 2 * i + 1]);
  }
  if (n_tiles > 0) {  // O += P_last V_last
    const int lst = (n_tiles - 1) % kStages;
    wgmma::mbar_wait(&v_full[lst], uint32_t((n_tiles - 1) / kStages) & 1);
    const unsigned char* vt = sV + lst * kTileBytes;
    wgmma::fence_regs(o);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kBc / 16; ++kk)
      wgmma::mma_rs_m64n128k16_tb(o, pa[kk], wgmma::desc_sw128(vt + kk * 16 * 128, 128 * 128, 1024));
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_regs(o);
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

bool wgmma_supported(int D, bool causal, float scale, int device) {
  if (D != kD || causal || !(scale > 0.f)) return false;
  return compute_capability(device) == 90;  // sm_90a machine code runs on compute capability 9.0 only
}

namespace {

// A [batch, rows, heads, 128] bf16 tensor as a TMA map with [128 rows, 64 columns] boxes in the 128-byte
// swizzle (the driver's encoder is looked up through the runtime, so nothing links libcuda).
CUtensorMap tensor_map(const void* base, int rows, int heads, int batch) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    ERNIE_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
    ERNIE_CHECK(q == cudaDriverEntryPointSuccess && fn, "attention: the CUDA driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  CUtensorMap m{};
  const cuuint64_t dims[4] = {cuuint64_t(kD), cuuint64_t(rows), cuuint64_t(heads), cuuint64_t(batch)};
  const cuuint64_t strides[3] = {cuuint64_t(heads) * kD * 2, cuuint64_t(kD) * 2, cuuint64_t(rows) * heads * kD * 2};
  const cuuint32_t box[4] = {64, 128, 1, 1}, elem_strides[4] = {1, 1, 1, 1};
  const CUresult r = encode(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void*>(base), dims, strides, box,
                            elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  ERNIE_CHECK(r == CUDA_SUCCESS, "attention: cuTensorMapEncodeTiled failed (error ", std::to_string(int(r)), ")");
  return m;
}

}  // namespace

void flash_wgmma(const Params& p, cudaStream_t st) {
  static bool configured = [] {
    ERNIE_CUDA_CHECK(cudaFuncSetAttribute(wgmma_flash_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    return true;
  }();
  (void)configured;
  const dim3 grid(unsigned((p.Sq + kBr - 1) / kBr), unsigned(p.Hq), unsigned(p.B));
  const CUtensorMap tq = tensor_map(p.q, p.Sq, p.Hq, p.B), tk = tensor_map(p.k, p.Sk, p.Hkv, p.B),
                    tv = tensor_map(p.v, p.Sk, p.Hkv, p.B);
  wgmma_flash_kernel<<<grid, kThreads, kSmem, st>>>(tq, tk, tv, p);
  ERNIE_CUDA_LAUNCH("attention (wgmma)");
}

}  // namespace ernie::cuda::attn
