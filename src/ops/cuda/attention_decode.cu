// Attention for a few query rows over a long cache (token-by-token decoding), split over the keys
// ("flash-decoding"): each block scores one chunk of keys for one (batch row, query row, head) with an
// online softmax per warp, merges its warps, and writes (max, sum, unnormalised output) to a workspace; a
// second kernel merges the chunks. The flash kernels give each head a single block for Sq = 1 (~90 us per
// layer on the H200 at 1,000 keys, half of a decode step); this spreads the keys over the whole GPU.
#include <algorithm>
#include <cmath>

#include "ops/cuda/attention_internal.h"
#include "ops/cuda/common.h"

namespace ernie::cuda::attn {

namespace {

constexpr int kWarps = 8, kMaxPerLane = 8, kMinKeysPerSplit = 64, kMaxSplits = 1024;

// The partial result of one chunk: m, l, then D accumulator values.
template <class T>
__global__ void decode_partial_kernel(const Params p, float* __restrict__ part, int splits, int keys_per_split) {
  __shared__ float sm[kWarps], sl[kWarps], sacc[kWarps][32 * kMaxPerLane];
  const int split = blockIdx.x, h = blockIdx.y, b = blockIdx.z / p.Sq, row = blockIdx.z % p.Sq;
  const int lane = threadIdx.x, warp = threadIdx.y, D = p.D, kh = h / (p.Hq / p.Hkv);
  const int64_t qs = int64_t(p.Hq) * D, ks = int64_t(p.Hkv) * D;
  const T* q = static_cast<const T*>(p.q) + (int64_t(b) * p.Sq + row) * qs + int64_t(h) * D;
  const T* K = static_cast<const T*>(p.k) + int64_t(b) * p.Sk * ks + int64_t(kh) * D;
  const T* V = static_cast<const T*>(p.v) + int64_t(b) * p.Sk * ks + int64_t(kh) * D;
  int64_t n = p.kv_len[b];
  if (p.causal) n = min(n, p.q_offset + row + 1);
  const int64_t j0 = int64_t(split) * keys_per_split, j1 = min(n, j0 + keys_per_split);
  float qv[kMaxPerLane], acc[kMaxPerLane];
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane + 32 * i;
    qv[i] = d < D ? to_f(q[d]) * p.scale : 0.f;
    acc[i] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (int64_t j = j0 + warp; j < j1; j += kWarps) {
    const T* kj = K + j * ks;
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < D) s += qv[i] * to_f(kj[d]);
    }
    s = warp_sum(s);
    const float m_new = fmaxf(m, s), corr = __expf(m - m_new), pj = __expf(s - m_new);
    l = l * corr + pj;
    const T* vj = V + j * ks;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < D) acc[i] = acc[i] * corr + pj * to_f(vj[d]);
    }
    m = m_new;
  }
  if (lane == 0) sm[warp] = m, sl[warp] = l;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) sacc[warp][lane + 32 * i] = acc[i];
  __syncthreads();
  if (warp != 0) return;
  float M = -INFINITY;
  for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm[w]);
  float* out = part + ((int64_t(blockIdx.z) * p.Hq + h) * splits + split) * (D + 2);
  float L = 0.f;
  for (int w = 0; w < kWarps; ++w) L += sm[w] == -INFINITY ? 0.f : sl[w] * __expf(sm[w] - M);
  for (int d = lane; d < D; d += 32) {
    float a = 0.f;
    for (int w = 0; w < kWarps; ++w) a += sm[w] == -INFINITY ? 0.f : sacc[w][d] * __expf(sm[w] - M);
    out[2 + d] = a;
  }
  if (lane == 0) out[0] = M, out[1] = L;
}

// One block per (batch row, query row, head): the chunks' weights e^(m_s - M) once (first warp), then each
// thread merges the chunks for its output dims.
template <class T>
__global__ void decode_combine_kernel(const Params p, const float* __restrict__ part, int splits) {
  __shared__ float w[kMaxSplits];
  __shared__ float inv_l;
  const int h = blockIdx.x, z = blockIdx.y, t = threadIdx.x, D = p.D;
  const float* in = part + (int64_t(z) * p.Hq + h) * splits * (D + 2);
  if (t < 32) {
    float M = -INFINITY;
    for (int s = t; s < splits; s += 32) M = fmaxf(M, in[s * (D + 2)]);
    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    float L = 0.f;
    for (int s = t; s < splits; s += 32) {
      const float m = in[s * (D + 2)], ws = m == -INFINITY ? 0.f : __expf(m - M);
      w[s] = ws;
      L += in[s * (D + 2) + 1] * ws;
    }
    L = warp_sum(L);
    if (t == 0) inv_l = L > 0.f ? 1.f / L : 0.f;
  }
  __syncthreads();
  T* o = static_cast<T*>(p.o) + int64_t(z) * p.Hq * D + int64_t(h) * D;
  for (int d = t; d < D; d += blockDim.x) {
    float a = 0.f;
#pragma unroll 4
    for (int s = 0; s < splits; ++s) a += in[s * (D + 2) + 2 + d] * w[s];
    o[d] = from_f<T>(a * inv_l);
  }
}

}  // namespace

bool decode_supported(int Sq, int D) { return Sq <= 4 && D <= 32 * kMaxPerLane; }

void decode(const Params& p, bool bf16, Tensor& workspace, cudaStream_t st) {
  const int keys_per_split = std::max(kMinKeysPerSplit, (p.Sk + kMaxSplits - 1) / kMaxSplits);
  const int splits = std::max(1, (p.Sk + keys_per_split - 1) / keys_per_split);
  const int64_t floats = int64_t(p.B) * p.Sq * p.Hq * splits * (p.D + 2);
  if (workspace.numel() < floats) workspace = Tensor::empty({floats}, DType::F32, workspace.device());
  float* part = static_cast<float*>(workspace.raw());
  const dim3 grid(unsigned(splits), unsigned(p.Hq), unsigned(p.B * p.Sq)), block(32, kWarps);
  const dim3 cgrid(unsigned(p.Hq), unsigned(p.B * p.Sq));
  if (bf16) {
    decode_partial_kernel<__nv_bfloat16><<<grid, block, 0, st>>>(p, part, splits, keys_per_split);
    decode_combine_kernel<__nv_bfloat16><<<cgrid, 128, 0, st>>>(p, part, splits);
  } else {
    decode_partial_kernel<float><<<grid, block, 0, st>>>(p, part, splits, keys_per_split);
    decode_combine_kernel<float><<<cgrid, 128, 0, st>>>(p, part, splits);
  }
  ERNIE_CUDA_LAUNCH("attention (decode)");
}

}  // namespace ernie::cuda::attn
