// One query row of attention held by one warp, shared by the simple and the decode kernels: lane `l` owns
// dims l, l + 32, ... (kMaxPerLane of them, so head_dim <= 256), scores are reduced across the warp, and the
// softmax is online in fp32 (running max m, running sum l, unnormalised output acc).
#pragma once
#include <cmath>

#include "ops/cuda/common.h"

namespace ernie::cuda::attn {

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

}  // namespace ernie::cuda::attn
