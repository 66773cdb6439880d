// FlashAttention-2 for bf16 on sm_80+ tensor cores (mma.sync m16n8k16, ldmatrix), fp32 softmax and
// accumulators. A block of 4 warps owns 128 query rows of one (batch, head); each warp 32 rows. Key/value
// tiles of 64 rows stream through shared memory (two stages, cp.async), swizzled so ldmatrix is free of
// bank conflicts. Masks: per-batch kv_len, causal at q_offset; keys past the valid range are zero-filled.
#include <cuda_pipeline.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "ops/cuda/attention_internal.h"
#include "ops/cuda/common.h"
#include "ops/cuda/mma_sm80.cuh"

namespace ernie::cuda::attn {

namespace {

using bf16 = __nv_bfloat16;
// Each warp owns kMT m16 tiles (32 query rows): every K/V fragment read from shared memory feeds kMT
// mma's, which keeps the tensor cores rather than shared memory the limit.
constexpr int kMT = 2, kWarps = 4, kThreads = 32 * kWarps, kBr = 16 * kMT * kWarps;

// Element offset of 16-byte chunk `c` of row `r` in a [rows, D] tile: chunks XOR-swizzled by row.
template <int D>
__device__ __forceinline__ int off(int r, int c) {
  constexpr int kChunks = D / 8, kSwz = kChunks < 8 ? kChunks : 8;
  return r * D + ((c ^ (r & (kSwz - 1))) * 8);
}

// Rows [row0, row0 + R) of a head slice (row stride `stride` elements) into a tile; rows >= `rows`
// are zero-filled.
template <int D, int R>
__device__ __forceinline__ void load_tile(bf16* tile, const bf16* g, int64_t stride, int row0, int rows) {
  constexpr int kChunks = D / 8, kTotal = R * kChunks;
  for (int i = threadIdx.x; i < kTotal; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    bf16* dst = tile + off<D>(r, c);
    if (row0 + r < rows) __pipeline_memcpy_async(dst, g + (row0 + r) * stride + c * 8, 16);
    else *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
  }
}

template <int D, int kBc>
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

  load_tile<D, kBr>(sQ, Q, qs, q0, p.Sq);
  if (n_tiles > 0) {
    load_tile<D, kBc>(sK, K, ks, 0, kv_rows);
    load_tile<D, kBc>(sV, V, ks, 0, kv_rows);
  }
  __pipeline_commit();

  float o[kMT][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
  float m[kMT][2], l[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.f;
  const float sl2 = p.scale * 1.4426950408889634f;
  const int warp_row = warp * 16 * kMT;  // first row of this warp in the tile
  const int mi = lane / 8;

  for (int j = 0; j < n_tiles; ++j) {
    const int st = j & 1;
    if (j + 1 < n_tiles) {
      load_tile<D, kBc>(sK + (st ^ 1) * kBc * D, K, ks, (j + 1) * kBc, kv_rows);
      load_tile<D, kBc>(sV + (st ^ 1) * kBc * D, V, ks, (j + 1) * kBc, kv_rows);
    }
    __pipeline_commit();
    __pipeline_wait_prior(1);
    __syncthreads();

    // S = Q Kᵀ: 32 rows x 64 keys per warp; Q fragments re-read from shared memory per k-step.
    float s[kMT][kBc / 8][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int i = 0; i < kBc / 8; ++i) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.f;
    const bf16* kt = sK + st * kBc * D;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qa[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
        mma::ldmatrix_x4(qa[mt], sQ + off<D>(warp_row + mt * 16 + (lane % 16), kk * 2 + lane / 16));
#pragma unroll
      for (int nn = 0; nn < kBc / 16; ++nn) {
        uint32_t bfr[4];
        mma::ldmatrix_x4(bfr, kt + off<D>(nn * 16 + (lane % 8) + (mi / 2) * 8, kk * 2 + (mi % 2)));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma::mma_bf16_16816(s[mt][2 * nn], qa[mt], bfr[0], bfr[1]);
          mma::mma_bf16_16816(s[mt][2 * nn + 1], qa[mt], bfr[2], bfr[3]);
        }
      }
    }

    // Mask, then online softmax in the log2 domain.
    const int key0 = j * kBc;
    const bool masked = p.causal || key0 + kBc > kv_len;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        int64_t limit = kv_len;
        if (p.causal) limit = min(limit, p.q_offset + q0 + warp_row + mt * 16 + g + 8 * r + 1);
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kBc / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float v = s[mt][nt][2 * r + e] * sl2;
            if (masked && key0 + nt * 8 + 2 * t + e >= limit) v = -INFINITY;
            s[mt][nt][2 * r + e] = v;
            mx = fmaxf(mx, v);
          }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[mt][r], mx);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;
        const float corr = exp2f(m[mt][r] - m_use);
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kBc / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float pv = exp2f(s[mt][nt][2 * r + e] - m_use);
            s[mt][nt][2 * r + e] = pv;
            sum += pv;
          }
        l[mt][r] = l[mt][r] * corr + sum;
        m[mt][r] = m_new;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
          o[mt][dt][2 * r] *= corr;
          o[mt][dt][2 * r + 1] *= corr;
        }
      }

    // O += P V; P's accumulators are already laid out as the A operand.
    const bf16* vt = sV + st * kBc * D;
#pragma unroll
    for (int kk = 0; kk < kBc / 16; ++kk) {
      uint32_t a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        a[mt][0] = mma::pack_bf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        a[mt][1] = mma::pack_bf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        a[mt][2] = mma::pack_bf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        a[mt][3] = mma::pack_bf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dn = 0; dn < D / 16; ++dn) {
        uint32_t bfr[4];
        mma::ldmatrix_x4_trans(bfr, vt + off<D>(kk * 16 + (lane % 8) + (mi % 2) * 8, dn * 2 + mi / 2));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma::mma_bf16_16816(o[mt][2 * dn], a[mt], bfr[0], bfr[1]);
          mma::mma_bf16_16816(o[mt][2 * dn + 1], a[mt], bfr[2], bfr[3]);
        }
      }
    }
    __syncthreads();  // the next iteration's loads overwrite this stage
  }

#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = l[mt][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      const int row = q0 + warp_row + mt * 16 + g + 8 * r;
      if (row >= p.Sq) continue;
      bf16* orow = O + int64_t(row) * qs;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt)
        *reinterpret_cast<__nv_bfloat162*>(orow + dt * 8 + 2 * t) =
            __floats2bfloat162_rn(o[mt][dt][2 * r] * inv, o[mt][dt][2 * r + 1] * inv);
    }
}

template <int D, int kBc>
void launch(const Params& p, cudaStream_t st) {
  constexpr int smem = (kBr + 4 * kBc) * D * int(sizeof(bf16));
  static bool configured = [] {
    ERNIE_CUDA_CHECK(cudaFuncSetAttribute(flash_kernel<D, kBc>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    return true;
  }();
  (void)configured;
  const dim3 grid(unsigned((p.Sq + kBr - 1) / kBr), unsigned(p.Hq), unsigned(p.B));
  flash_kernel<D, kBc><<<grid, kThreads, smem, st>>>(p);
  ERNIE_CUDA_LAUNCH("attention");
}

bool bc32() {
  const char* e = std::getenv("ERNIE_FLASH_BC");
  return e && std::string(e) == "32";
}

}  // namespace

bool flash_supported(int D) { return D == 16 || D == 32 || D == 64 || D == 128; }

void flash_bf16(const Params& p, cudaStream_t st) {
  switch (p.D) {
    case 16: launch<16, 64>(p, st); break;
    case 32: launch<32, 64>(p, st); break;
    case 64: launch<64, 64>(p, st); break;
    default:  // 64 keys per tile spill a few registers at head_dim 128; ERNIE_FLASH_BC=32 takes 32
      if (bc32()) launch<128, 32>(p, st);
      else launch<128, 64>(p, st);
      break;
  }
}

}  // namespace ernie::cuda::attn
