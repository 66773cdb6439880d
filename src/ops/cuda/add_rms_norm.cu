// add_rms_norm: sum = x + y (stored in the activation dtype) and normed = rms_norm(sum) in one kernel. One
// block per row (decoding has one or a few wide rows; the block's warps share the sum of squares). A thread
// keeps its first packs of the sum in registers; past those it reads back only sum elements it stored itself,
// so the second pass needs no extra barrier.
#include <type_traits>

#include "ops/cuda/common.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/pdl.cuh"
#include "ops/shape_rules.h"

namespace ernie::cuda {

namespace {

constexpr int kThreads = 256, kCached = 4;

// P elements per access: 16-byte packs when the row width is a multiple of them and rows are aligned, else 1.
template <class T, int P>
struct alignas(sizeof(T) * P) Elems {
  T v[P];
};

template <class T, int P>
__global__ void add_rms_norm_kernel(const Elems<T, P>* __restrict__ x, const Elems<T, P>* __restrict__ y, VecF w,
                                    Elems<T, P>* sum, Elems<T, P>* __restrict__ normed, int n, float eps) {
  __shared__ float part[kThreads / 32];
  pdl_wait();
  pdl_launch_dependents();
  const int64_t row = int64_t(blockIdx.x) * n;
  x += row, y += row, sum += row, normed += row;
  // The first kCached packs of each thread stay in registers (with their weights, loaded alongside x and y):
  // one round trip to memory before the reduction, none after it for a decoding row of up to 8192 bf16.
  Elems<T, P> kept[kCached];
  float wk[kCached][P];
  float ss = 0.f;
  auto add = [&](int i, Elems<T, P>& s) {
    const Elems<T, P> a = x[i], b = y[i];
#pragma unroll
    for (int e = 0; e < P; ++e) {
      s.v[e] = from_f<T>(to_f(a.v[e]) + to_f(b.v[e]));
      const float r = to_f(s.v[e]);  // the stored (rounded) sum is what gets normalised
      ss += r * r;
    }
    sum[i] = s;
  };
#pragma unroll
  for (int c = 0; c < kCached; ++c) {
    const int i = threadIdx.x + c * kThreads;
    if (i >= n) break;
#pragma unroll
    for (int e = 0; e < P; ++e) wk[c][e] = w.defined() ? w[int64_t(i) * P + e] : 1.f;
    add(i, kept[c]);
  }
  for (int i = threadIdx.x + kCached * kThreads; i < n; i += kThreads) {
    Elems<T, P> s;
    add(i, s);
  }
  ss = warp_sum(ss);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = ss;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int k = 0; k < kThreads / 32; ++k) total += part[k];
  const float inv = rsqrtf(total / float(n * P) + eps);
  auto norm = [&](int i, const Elems<T, P>& s, const float* wi) {
    Elems<T, P> r;
#pragma unroll
    for (int e = 0; e < P; ++e) {
      const float v = to_f(s.v[e]) * inv;
      r.v[e] = from_f<T>(w.defined() ? v * wi[e] : v);
    }
    normed[i] = r;
  };
#pragma unroll
  for (int c = 0; c < kCached; ++c) {
    const int i = threadIdx.x + c * kThreads;
    if (i >= n) break;
    norm(i, kept[c], wk[c]);
  }
  // Packs past the cached ones: each thread reads back only the sum elements it stored itself.
  for (int i = threadIdx.x + kCached * kThreads; i < n; i += kThreads) {
    float wi[P];
#pragma unroll
    for (int e = 0; e < P; ++e) wi[e] = w.defined() ? w[int64_t(i) * P + e] : 1.f;
    norm(i, sum[i], wi);
  }
}

}  // namespace

ops::SumNorm add_rms_norm(const Tensor& x, const Tensor& y, const Tensor& weight, float eps) {
  detail::check_act(x, "add_rms_norm", "x");
  detail::check_act(y, "add_rms_norm", "y");
  detail::check_same_device(x, y, "add_rms_norm", "y");
  ERNIE_CHECK(x.dtype() == y.dtype(), "add_rms_norm: x is ", dtype_name(x.dtype()), ", y is ", dtype_name(y.dtype()));
  ops::rules::add_rms_norm(x, y);
  const int64_t c = x.dim(-1), rows = c ? x.numel() / c : 0;
  if (weight.defined()) {
    detail::check_same_device(x, weight, "add_rms_norm", "weight");
    detail::check_float(weight, "add_rms_norm", "weight");
    ERNIE_CHECK(weight.numel() == c, "add_rms_norm: weight ", shape_str(weight.shape()), " does not match rows of ",
                std::to_string(c));
  }
  ERNIE_CHECK(rows <= INT32_MAX && c <= INT32_MAX, "add_rms_norm: sizes too large");
  ops::SumNorm r{Tensor::empty(x.shape(), x.dtype(), x.device()), Tensor::empty(x.shape(), x.dtype(), x.device())};
  if (rows == 0 || c == 0) return r;
  cudaStream_t st = stream(detail::dev(x));
  ERNIE_DISPATCH_ACT(x.dtype(), "add_rms_norm", {
    auto run = [&](auto p) {
      constexpr int P = decltype(p)::value;
      using E = Elems<T, P>;
      launch_kernel(pdl_enabled(detail::dev(x)), add_rms_norm_kernel<T, P>, dim3(unsigned(rows)), dim3(kThreads), 0, st,
                    x.data<E>(), y.data<E>(), vec(weight), r.sum.data<E>(), r.normed.data<E>(), int(c / P), eps);
    };
    if (c % kPack<T> == 0 && aligned16(x.raw()) && aligned16(y.raw())) run(std::integral_constant<int, kPack<T>>{});
    else run(std::integral_constant<int, 1>{});
  });
  ERNIE_CUDA_LAUNCH("add_rms_norm");
  return r;
}

}  // namespace ernie::cuda
