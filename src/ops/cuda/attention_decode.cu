// Attention for a few query rows over a long cache (token-by-token decoding), split over the keys
// ("flash-decoding"), in one kernel. A block takes one chunk of keys for one (batch row, query row) and up to
// kHeads query heads that share one kv head (GQA), so each K/V row is read once for all of them: its warps
// take every kWarps-th key (the next key's rows loaded while the current one is scored), keep one online
// softmax per head (attention_row.cuh), then merge over the warps. With one chunk that is the output; else
// each block writes (max, sum, unnormalised output) per head to a workspace and the last block of the
// (row, head group) to finish merges the chunks (a ticket counter per group, reset by that block).
#include <algorithm>
#include <cmath>

#include "ops/cuda/attention_internal.h"
#include "ops/cuda/attention_row.cuh"
#include "ops/cuda/common.h"
#include "ops/cuda/pdl.cuh"

namespace ernie::cuda::attn {

namespace {

constexpr int kWarps = 4, kHeads = 4, kMinKeysPerSplit = 32, kMaxSplits = 256;
constexpr int kMaxGroups = 32;                         // kv heads × head chunks per launch
constexpr int kMaxTickets = kMaxBatch * 4 * kMaxGroups;  // × (batch row, query row)
static_assert(kHeads <= kWarps, "the merge gives each head of a block one warp");

// Finished blocks per (batch row · query row, head group) of the launch in flight; 0 between launches.
__device__ unsigned g_tickets[kMaxTickets];

template <class T>
__global__ void __launch_bounds__(32 * kWarps) decode_kernel(const Params p, float* __restrict__ part, int splits,
                                                             int keys_per_split, int chunks) {
  __shared__ float sm[kWarps][kHeads], sl[kWarps][kHeads], sacc[kWarps][kHeads][32 * kMaxPerLane];
  __shared__ float wsplit[kHeads][kMaxSplits], inv_l[kHeads];
  __shared__ bool last;
  pdl_launch_dependents();  // a GEMV launched with PDL next may start its weight prefetch (it waits for us)
  const int split = blockIdx.x, kh = blockIdx.y / chunks, chunk = blockIdx.y % chunks, z = blockIdx.z;
  const int b = z / p.Sq, row = z % p.Sq, G = p.Hq / p.Hkv, h0 = kh * G + chunk * kHeads;
  const int hb = min(kHeads, G - chunk * kHeads), lane = threadIdx.x, warp = threadIdx.y, D = p.D;
  const int tid = warp * 32 + lane;
  const int64_t ks = int64_t(p.Hkv) * D;
  const T* q = static_cast<const T*>(p.q) + int64_t(z) * p.Hq * D;  // z = b·Sq + row
  const T* K = static_cast<const T*>(p.k) + int64_t(b) * p.Sk * ks + int64_t(kh) * D;
  const T* V = static_cast<const T*>(p.v) + int64_t(b) * p.Sk * ks + int64_t(kh) * D;
  T* o = static_cast<T*>(p.o) + int64_t(z) * p.Hq * D;
  int64_t n = p.kv_len[b];
  if (p.causal) n = min(n, p.q_offset + row + 1);
  const int64_t j1 = min(n, int64_t(split + 1) * keys_per_split);

  float qv[kHeads][kMaxPerLane];
  OnlineRow r[kHeads];
#pragma unroll
  for (int g = 0; g < kHeads; ++g) load_lane_dims(q + int64_t(h0 + min(g, hb - 1)) * D, D, p.scale, qv[g]);
  float kv[kMaxPerLane], vv[kMaxPerLane], kn[kMaxPerLane], vn[kMaxPerLane];
  int64_t j = int64_t(split) * keys_per_split + warp;
  if (j < j1) load_lane_dims(K + j * ks, D, 1.f, kv), load_lane_dims(V + j * ks, D, 1.f, vv);
  for (; j < j1; j += kWarps) {
    if (j + kWarps < j1) {  // the next key's rows in flight while this one is scored
      load_lane_dims(K + (j + kWarps) * ks, D, 1.f, kn);
      load_lane_dims(V + (j + kWarps) * ks, D, 1.f, vn);
    }
#pragma unroll
    for (int g = 0; g < kHeads; ++g)
      if (g < hb) r[g].add(warp_dot(qv[g], kv), vv);
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) kv[i] = kn[i], vv[i] = vn[i];
  }

  // Merge the warps: thread (g, d) for each head and output dim.
#pragma unroll
  for (int g = 0; g < kHeads; ++g) {
    if (lane == 0) sm[warp][g] = r[g].m, sl[warp][g] = r[g].l;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) sacc[warp][g][lane + 32 * i] = r[g].acc[i];
  }
  __syncthreads();
  for (int idx = tid; idx < hb * D; idx += 32 * kWarps) {
    const int g = idx / D, d = idx % D;
    float M = -INFINITY, L = 0.f, a = 0.f;
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm[w][g]);
    for (int w = 0; w < kWarps; ++w) {
      const float e = sm[w][g] == -INFINITY ? 0.f : __expf(sm[w][g] - M);
      L += sl[w][g] * e, a += sacc[w][g][d] * e;
    }
    if (splits == 1) {
      o[int64_t(h0 + g) * D + d] = from_f<T>(L > 0.f ? a / L : 0.f);
    } else {
      float* out = part + ((int64_t(z) * p.Hq + h0 + g) * splits + split) * (D + 2);
      out[2 + d] = a;
      if (d == 0) out[0] = M, out[1] = L;
    }
  }
  if (splits == 1) return;

  // The last block of this (row, head group) merges the chunks.
  __threadfence();
  __syncthreads();
  unsigned* ticket = g_tickets + (int64_t(z) * gridDim.y + blockIdx.y);
  if (tid == 0) last = atomicAdd(ticket, 1u) == unsigned(splits - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (warp < hb) {  // warp g: the chunks' weights e^(m_s - M) for head g
    const float* in = part + (int64_t(z) * p.Hq + h0 + warp) * splits * (D + 2);
    float M = -INFINITY;
    for (int s = lane; s < splits; s += 32) M = fmaxf(M, __ldcg(in + s * (D + 2)));
    for (int off = 16; off > 0; off >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
    float L = 0.f;
    for (int s = lane; s < splits; s += 32) {
      const float m = __ldcg(in + s * (D + 2)), w = m == -INFINITY ? 0.f : __expf(m - M);
      wsplit[warp][s] = w;
      L += __ldcg(in + s * (D + 2) + 1) * w;
    }
    L = warp_sum(L);
    if (lane == 0) inv_l[warp] = L > 0.f ? 1.f / L : 0.f;
  }
  __syncthreads();
  for (int idx = tid; idx < hb * D; idx += 32 * kWarps) {
    const int g = idx / D, d = idx % D;
    const float* in = part + (int64_t(z) * p.Hq + h0 + g) * splits * (D + 2) + 2 + d;
    float a = 0.f;
#pragma unroll 4
    for (int s = 0; s < splits; ++s) a += __ldcg(in + s * (D + 2)) * wsplit[g][s];
    o[int64_t(h0 + g) * D + d] = from_f<T>(a * inv_l[g]);
  }
  if (tid == 0) *ticket = 0;  // ready for the next launch
}

int head_chunks(int Hq, int Hkv) { return (Hq / Hkv + kHeads - 1) / kHeads; }

}  // namespace

bool decode_supported(int Sq, int Hq, int Hkv, int D) {
  return Sq <= 4 && D <= 32 * kMaxPerLane && Hkv > 0 && Hq % Hkv == 0 && Hkv * head_chunks(Hq, Hkv) <= kMaxGroups;
}

void decode(const Params& p, bool bf16, Tensor& workspace, cudaStream_t st) {
  const int keys_per_split = std::max(kMinKeysPerSplit, (p.Sk + kMaxSplits - 1) / kMaxSplits);
  const int splits = std::max(1, (p.Sk + keys_per_split - 1) / keys_per_split);
  const int chunks = head_chunks(p.Hq, p.Hkv);
  const int64_t floats = splits == 1 ? 0 : int64_t(p.B) * p.Sq * p.Hq * splits * (p.D + 2);
  if (workspace.numel() < floats) workspace = Tensor::empty({floats}, DType::F32, workspace.device());
  float* part = static_cast<float*>(workspace.raw());
  const dim3 grid(unsigned(splits), unsigned(p.Hkv * chunks), unsigned(p.B * p.Sq)), block(32, kWarps);
  if (bf16) decode_kernel<__nv_bfloat16><<<grid, block, 0, st>>>(p, part, splits, keys_per_split, chunks);
  else decode_kernel<float><<<grid, block, 0, st>>>(p, part, splits, keys_per_split, chunks);
  ERNIE_CUDA_LAUNCH("attention (decode)");
}

}  // namespace ernie::cuda::attn
