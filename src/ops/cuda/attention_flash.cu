// FlashAttention-2 for bf16 on sm_80+ tensor cores (mma.sync m16n8k16, ldmatrix), fp32 softmax and
// accumulators. A block of 4 warps owns 64 query rows of one (batch, head); each warp 16 rows. Key/value
// tiles of 64 rows stream through shared memory (two stages, cp.async), swizzled so ldmatrix is free of
// bank conflicts. Masks: per-batch kv_len, causal at q_offset; keys past the valid range are zero-filled.
#include <cuda_pipeline.h>

#include <cmath>

#include "ops/cuda/attention_internal.h"
#include "ops/cuda/common.h"
#include "ops/cuda/mma_sm80.cuh"

namespace ernie::cuda::attn {

namespace {

using bf16 = __nv_bfloat16;
constexpr int kBr = 64, kBc = 64, kThreads = 128;

// Element offset of 16-byte chunk `c` of row `r` in a [64, D] tile: chunks XOR-swizzled by row.
template <int D>
__device__ __forceinline__ int off(int r, int c) {
  constexpr int kChunks = D / 8, kSwz = kChunks < 8 ? kChunks : 8;
  return r * D + ((c ^ (r & (kSwz - 1))) * 8);
}

// Rows [row0, row0 + 64) of a head slice (row stride `stride` elements) into a tile; rows >= `rows`
// are zero-filled.
template <int D>
__device__ __forceinline__ void load_tile(bf16* tile, const bf16* g, int64_t stride, int row0, int rows) {
  constexpr int kChunks = D / 8, kTotal = kBc * kChunks;
  for (int i = threadIdx.x; i < kTotal; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    bf16* dst = tile + off<D>(r, c);
    if (row0 + r < rows) __pipeline_memcpy_async(dst, g + (row0 + r) * stride + c * 8, 16);
    else *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads) flash_kernel(const Params p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);
  bf16* sK = sQ + kBr * D;      // two stages
  bf16* sV = sK + 2 * kBc * D;  // two stages

  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kBr;
  const int kh = h / (p.Hq / p.Hkv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t qs = int64_t(p.Hq) * D, ks = int64_t(p.Hkv) * D;
  const bf16* Q = static_cast<const bf16*>(p.q) + int64_t(b) * p.Sq * qs + int64_t(h) * D;
  const bf16* K = static_cast<const bf16*>(p.k) + int64_t(b) * p.Sk * ks + int64_t(kh) * D;
  const bf16* V = static_cast<const bf16*>(p.v) + int64_t(b) * p.Sk * ks + int64_t(kh) * D;
  bf16* O = static_cast<bf16*>(p.o) + int64_t(b) * p.Sq * qs + int64_t(h) * D;

  const int kv_len = p.kv_len[b];
  int64_t kv_end = kv_len;
  if (p.causal) kv_end = min(kv_end, p.q_offset + q0 + kBr);
  const int n_tiles = kv_end > 0 ? int((kv_end + kBc - 1) / kBc) : 0;
  const int kv_rows = int(kv_end > 0 ? kv_end : 0);

  load_tile<D>(sQ, Q, qs, q0, p.Sq);
  if (n_tiles > 0) {
    load_tile<D>(sK, K, ks, 0, kv_rows);
    load_tile<D>(sV, V, ks, 0, kv_rows);
  }
  __pipeline_commit();

  uint32_t qf[D / 16][4];
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const float sl2 = p.scale * 1.4426950408889634f;
  const int row_base = q0 + warp * 16 + g;  // this thread's rows: row_base and row_base + 8

  for (int j = 0; j < n_tiles; ++j) {
    const int st = j & 1;
    if (j + 1 < n_tiles) {
      load_tile<D>(sK + (st ^ 1) * kBc * D, K, ks, (j + 1) * kBc, kv_rows);
      load_tile<D>(sV + (st ^ 1) * kBc * D, V, ks, (j + 1) * kBc, kv_rows);
    }
    __pipeline_commit();
    __pipeline_wait_prior(1);
    __syncthreads();
    if (j == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) mma::ldmatrix_x4(qf[kk], sQ + off<D>(warp * 16 + (lane % 16), kk * 2 + lane / 16));
    }

    // S = Q Kᵀ for 16 rows x 64 keys per warp.
    float s[kBc / 8][4];
#pragma unroll
    for (int i = 0; i < kBc / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
    const bf16* kt = sK + st * kBc * D;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
      for (int nn = 0; nn < kBc / 16; ++nn) {
        uint32_t bfr[4];
        const int mi = lane / 8;
        mma::ldmatrix_x4(bfr, kt + off<D>(nn * 16 + (lane % 8) + (mi / 2) * 8, kk * 2 + (mi % 2)));
        mma::mma_bf16_16816(s[2 * nn], qf[kk], bfr[0], bfr[1]);
        mma::mma_bf16_16816(s[2 * nn + 1], qf[kk], bfr[2], bfr[3]);
      }

    // Mask, then online softmax in the log2 domain.
    const int key0 = j * kBc;
    const bool masked = p.causal || key0 + kBc > kv_len;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      int64_t limit = kv_len;
      if (p.causal) limit = min(limit, p.q_offset + row_base + 8 * r + 1);
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kBc / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float v = s[nt][2 * r + e] * sl2;
          if (masked && key0 + nt * 8 + 2 * t + e >= limit) v = -INFINITY;
          s[nt][2 * r + e] = v;
          mx = fmaxf(mx, v);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[r], mx);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float corr = exp2f(m[r] - m_use);
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < kBc / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pv = exp2f(s[nt][2 * r + e] - m_use);
          s[nt][2 * r + e] = pv;
          sum += pv;
        }
      l[r] = l[r] * corr + sum;
      m[r] = m_new;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        o[dt][2 * r] *= corr;
        o[dt][2 * r + 1] *= corr;
      }
    }

    // O += P V; P's accumulators are already laid out as the A operand.
    const bf16* vt = sV + st * kBc * D;
#pragma unroll
    for (int kk = 0; kk < kBc / 16; ++kk) {
      const uint32_t a[4] = {mma::pack_bf16(s[2 * kk][0], s[2 * kk][1]), mma::pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                             mma::pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             mma::pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dn = 0; dn < D / 16; ++dn) {
        uint32_t bfr[4];
        const int mi = lane / 8;
        mma::ldmatrix_x4_trans(bfr, vt + off<D>(kk * 16 + (lane % 8) + (mi % 2) * 8, dn * 2 + mi / 2));
        mma::mma_bf16_16816(o[2 * dn], a, bfr[0], bfr[1]);
        mma::mma_bf16_16816(o[2 * dn + 1], a, bfr[2], bfr[3]);
      }
    }
    __syncthreads();  // the next iteration's loads overwrite this stage
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = l[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    const int row = row_base + 8 * r;
    if (row >= p.Sq) continue;
    bf16* orow = O + int64_t(row) * qs;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
      *reinterpret_cast<__nv_bfloat162*>(orow + dt * 8 + 2 * t) =
          __floats2bfloat162_rn(o[dt][2 * r] * inv, o[dt][2 * r + 1] * inv);
  }
}

template <int D>
void launch(const Params& p, cudaStream_t st) {
  constexpr int smem = (kBr + 4 * kBc) * D * int(sizeof(bf16));
  static bool configured = [] {
    ERNIE_CUDA_CHECK(cudaFuncSetAttribute(flash_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    return true;
  }();
  (void)configured;
  const dim3 grid(unsigned((p.Sq + kBr - 1) / kBr), unsigned(p.Hq), unsigned(p.B));
  flash_kernel<D><<<grid, kThreads, smem, st>>>(p);
  ERNIE_CUDA_LAUNCH("attention");
}

}  // namespace

bool flash_supported(int D) { return D == 16 || D == 32 || D == 64 || D == 128; }

void flash_bf16(const Params& p, cudaStream_t st) {
  switch (p.D) {
    case 16: launch<16>(p, st); break;
    case 32: launch<32>(p, st); break;
    case 64: launch<64>(p, st); break;
    default: launch<128>(p, st); break;
  }
}

}  // namespace ernie::cuda::attn
