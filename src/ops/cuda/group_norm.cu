// GroupNorm over [B, C, *] with per-channel affine and optional fused SiLU. A group can hold millions
// of elements (VAE decoder at 1024²), so the statistics are split over chunks: pass 1 writes each
// chunk's (count, mean, M2); pass 2 combines a group's chunks (Chan's formula, double); pass 3 normalises.
#include <algorithm>

#include "ops/cuda/common.h"
#include "ops/cuda/cuda_ops.h"

namespace ernie::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = 16384;  // elements per block

__device__ float block_sum(float v, float* sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  float t = 0.f;
  for (int i = 0; i < kThreads / 32; ++i) t += sh[i];
  return t;
}

// grid (chunks, B*groups). stats[(bg * chunks + chunk) * 2] = (mean, M2) of the chunk.
template <class T>
__global__ void group_stats_kernel(const T* __restrict__ x, float* __restrict__ stats, int64_t len, int chunks) {
  __shared__ float sh[kThreads / 32];
  const int64_t bg = blockIdx.y, start = blockIdx.x * kChunk, end = min(len, start + kChunk);
  const T* p = x + bg * len;
  float s = 0.f;
  for (int64_t i = start + threadIdx.x; i < end; i += kThreads) s += to_f(p[i]);
  const float n = float(end - start);
  const float mean = block_sum(s, sh) / n;
  float m2 = 0.f;
  for (int64_t i = start + threadIdx.x; i < end; i += kThreads) {
    const float d = to_f(p[i]) - mean;
    m2 += d * d;
  }
  m2 = block_sum(m2, sh);
  if (threadIdx.x == 0) {
    stats[(bg * chunks + blockIdx.x) * 2] = mean;
    stats[(bg * chunks + blockIdx.x) * 2 + 1] = m2;
  }
}

struct Moments {
  double n, mean, m2;
};
__device__ Moments combine(Moments a, Moments b) {
  const double tot = a.n + b.n;
  if (tot == 0) return a;
  const double d = b.mean - a.mean;
  return {tot, a.mean + d * b.n / tot, a.m2 + b.m2 + d * d * a.n * b.n / tot};
}

// One warp per group: combines its chunks into (mean, 1/std), written over the first chunk's slot.
__global__ void group_finalize_kernel(float* __restrict__ stats, int64_t len, int chunks, float eps) {
  const int64_t bg = blockIdx.x;
  Moments m{0, 0, 0};
  for (int c = threadIdx.x; c < chunks; c += 32) {
    const double nb = double(min(kChunk, len - int64_t(c) * kChunk));
    m = combine(m, {nb, stats[(bg * chunks + c) * 2], stats[(bg * chunks + c) * 2 + 1]});
  }
  for (int o = 16; o > 0; o >>= 1) {
    Moments other{__shfl_xor_sync(0xffffffffu, m.n, o), __shfl_xor_sync(0xffffffffu, m.mean, o),
                  __shfl_xor_sync(0xffffffffu, m.m2, o)};
    m = combine(m, other);
  }
  __syncwarp();
  if (threadIdx.x == 0) {
    stats[bg * chunks * 2] = float(m.mean);
    stats[bg * chunks * 2 + 1] = float(1.0 / sqrt(m.m2 / m.n + double(eps)));
  }
}

template <class T>
__global__ void group_apply_kernel(const T* __restrict__ x, const float* __restrict__ stats, VecF w, VecF b,
                                   T* __restrict__ y, int64_t len, int64_t hw, int chunks, int groups, int cg,
                                   bool silu) {
  const int64_t bg = blockIdx.y;
  const float mean = stats[bg * chunks * 2], inv = stats[bg * chunks * 2 + 1];
  const int g = int(bg % groups);
  const int64_t start = blockIdx.x * kChunk, end = min(len, start + kChunk);
  const T* p = x + bg * len;
  T* q = y + bg * len;
  for (int64_t i = start + threadIdx.x; i < end; i += kThreads) {
    const int ch = g * cg + int(unsigned(i) / unsigned(hw));  // len < 2^32 (checked)
    float v = (to_f(p[i]) - mean) * inv;
    if (w.defined()) v *= w[ch];
    if (b.defined()) v += b[ch];
    if (silu) v = v / (1.f + __expf(-v));
    q[i] = from_f<T>(v);
  }
}

}  // namespace

Tensor group_norm(const Tensor& x, int groups, const Tensor& weight, const Tensor& bias, float eps, bool silu) {
  detail::check_act(x, "group_norm", "x");
  ERNIE_CHECK(x.ndim() >= 2, "group_norm: x ", shape_str(x.shape()), " must be [B, C, ...]");
  const int64_t n = x.dim(0), c = x.dim(1), hw = (n * c) ? x.numel() / (n * c) : 0;
  ERNIE_CHECK(groups > 0 && c % groups == 0, "group_norm: ", std::to_string(c), " channels of x ",
              shape_str(x.shape()), " are not divisible into ", std::to_string(groups), " groups");
  for (auto [t, what] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}}) {
    if (!t->defined()) continue;
    detail::check_same_device(x, *t, "group_norm", what);
    detail::check_float(*t, "group_norm", what);
    ERNIE_CHECK(t->numel() == c, "group_norm: ", what, " ", shape_str(t->shape()), " should have ", std::to_string(c),
                " elements");
  }
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  const int64_t cg = c / groups, len = cg * hw;
  if (y.numel() == 0) return y;
  ERNIE_CHECK(len < (int64_t(1) << 32), "group_norm: group of ", std::to_string(len), " elements is too large");
  const int chunks = int((len + kChunk - 1) / kChunk);
  Tensor stats = Tensor::empty({n * groups, chunks, 2}, DType::F32, x.device());
  cudaStream_t st = stream(detail::dev(x));
  const dim3 grid(unsigned(chunks), unsigned(n * groups));
  ERNIE_DISPATCH_ACT(x.dtype(), "group_norm", {
    group_stats_kernel<T><<<grid, kThreads, 0, st>>>(x.data<T>(), stats.data<float>(), len, chunks);
    ERNIE_CUDA_LAUNCH("group_norm");
    group_finalize_kernel<<<unsigned(n * groups), 32, 0, st>>>(stats.data<float>(), len, chunks, eps);
    ERNIE_CUDA_LAUNCH("group_norm");
    group_apply_kernel<T><<<grid, kThreads, 0, st>>>(x.data<T>(), stats.data<float>(), vec(weight), vec(bias),
                                                     y.data<T>(), len, hw, chunks, groups, int(cg), silu);
  });
  ERNIE_CUDA_LAUNCH("group_norm");
  return y;
}

}  // namespace ernie::cuda
