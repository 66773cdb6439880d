// Attention for any head_dim <= 256 in F32 or BF16: one warp per query row, each lane owning head_dim/32
// dims; scores reduced across the warp, online softmax in fp32. The f32 debugging mode and the head
// sizes the flash kernel does not cover run here.
#include <cmath>

#include "ops/cuda/attention_internal.h"
#include "ops/cuda/common.h"

namespace ernie::cuda::attn {

namespace {

// One query row held by one warp: lane `l` owns dims l, l + 32, ... (kMaxPerLane of them).
constexpr int kMaxPerLane = 8;

// The lane's dims of a row of D values, times `scale`; dims past D read as 0.
template <class T>
__device__ __forceinline__ void load_lane_dims(const T* __restrict__ row, int D, float scale,
                                               float (&out)[kMaxPerLane]) {
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = threadIdx.x + 32 * i;
    out[i] = d < D ? to_f(row[d]) * scale : 0.f;
  }
}

// q·k over the warp (every lane gets it).
__device__ __forceinline__ float warp_dot(const float (&q)[kMaxPerLane], const float (&k)[kMaxPerLane]) {
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) s += q[i] * k[i];
  return warp_sum(s);
}

struct OnlineRow {
  float m = -INFINITY, l = 0.f;
  float acc[kMaxPerLane] = {};
  // Takes in one key with score s and value row v (the lane's dims).
  __device__ __forceinline__ void add(float s, const float (&v)[kMaxPerLane]) {
    const float m_new = fmaxf(m, s), corr = __expf(m - m_new), p = __expf(s - m_new);
    l = l * corr + p;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) acc[i] = acc[i] * corr + p * v[i];
    m = m_new;
  }
};

constexpr int kWarps = 4;

template <class T>
__global__ void simple_kernel(const Params p) {
  const int row = blockIdx.x * kWarps + threadIdx.y, h = blockIdx.y, b = blockIdx.z, lane = threadIdx.x;
  if (row >= p.Sq) return;
  const int D = p.D, kh = h / (p.Hq / p.Hkv);
  const int64_t qs = int64_t(p.Hq) * D, ks = int64_t(p.Hkv) * D;
  const T* q = static_cast<const T*>(p.q) + (int64_t(b) * p.Sq + row) * qs + int64_t(h) * D;
  const T* K = static_cast<const T*>(p.k) + int64_t(b) * p.Sk * ks + int64_t(kh) * D;
  const T* V = static_cast<const T*>(p.v) + int64_t(b) * p.Sk * ks + int64_t(kh) * D;
  T* o = static_cast<T*>(p.o) + (int64_t(b) * p.Sq + row) * qs + int64_t(h) * D;

  int64_t n = p.kv_len[b];
  if (p.causal) n = min(n, p.q_offset + row + 1);
  float qv[kMaxPerLane], kv[kMaxPerLane], vv[kMaxPerLane];
  load_lane_dims(q, D, p.scale, qv);
  OnlineRow r;
  for (int64_t j = 0; j < n; ++j) {
    load_lane_dims(K + j * ks, D, 1.f, kv);
    load_lane_dims(V + j * ks, D, 1.f, vv);
    r.add(warp_dot(qv, kv), vv);
  }
  const float inv = r.l > 0.f ? 1.f / r.l : 0.f;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < D) o[d] = from_f<T>(r.acc[i] * inv);
  }
}

}  // namespace

void simple(const Params& p, bool bf16, cudaStream_t st) {
  const dim3 block(32, kWarps), grid(unsigned((p.Sq + kWarps - 1) / kWarps), unsigned(p.Hq), unsigned(p.B));
  if (bf16) simple_kernel<__nv_bfloat16><<<grid, block, 0, st>>>(p);
  else simple_kernel<float><<<grid, block, 0, st>>>(p);
  ERNIE_CUDA_LAUNCH("attention");
}

}  // namespace ernie::cuda::attn
