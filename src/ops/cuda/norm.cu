// rms_norm and layer_norm over the last dim: one warp per row, fp32 statistics, then a second pass
// that writes the normalised row (the row is still in L1/L2).
#include "ops/cuda/common.h"
#include "ops/cuda/cuda_ops.h"

namespace ernie::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int64_t kFewRows = 64;  // fewer rows than this: a block per row

template <class T>
__global__ void rms_norm_kernel(const T* __restrict__ x, VecF w, T* __restrict__ y, int64_t rows, int c, float eps) {
  const int64_t row = blockIdx.x * int64_t(kWarps) + threadIdx.y;
  if (row >= rows) return;
  const T* xr = x + row * c;
  T* yr = y + row * c;
  float ss = 0.f;
  for (int i = threadIdx.x; i < c; i += 32) {
    const float v = to_f(xr[i]);
    ss += v * v;
  }
  const float inv = rsqrtf(warp_sum(ss) / float(c) + eps);
  for (int i = threadIdx.x; i < c; i += 32) {
    const float v = to_f(xr[i]) * inv;
    yr[i] = from_f<T>(w.defined() ? v * w[i] : v);
  }
}

// y = x · inv (· w) over packs start, start + stride, ... of one row of cp packs.
template <class T>
__device__ __forceinline__ void scale_row(const Pack<T>* xr, VecF w, Pack<T>* yr, int cp, float inv, int start,
                                          int stride) {
  constexpr int P = kPack<T>;
  for (int i = start; i < cp; i += stride) {
    const Pack<T> a = xr[i];
    Pack<T> r;
#pragma unroll
    for (int e = 0; e < P; ++e) {
      const float v = to_f(a.v[e]) * inv;
      r.v[e] = from_f<T>(w.defined() ? v * w[i * P + e] : v);
    }
    yr[i] = r;
  }
}

// The same with 16-byte packs (C % pack == 0, aligned rows).
template <class T>
__global__ void rms_norm_vec_kernel(const Pack<T>* __restrict__ x, VecF w, Pack<T>* __restrict__ y, int64_t rows,
                                    int cp, float eps) {
  const int64_t row = blockIdx.x * int64_t(kWarps) + threadIdx.y;
  if (row >= rows) return;
  const Pack<T>* xr = x + row * cp;
  Pack<T>* yr = y + row * cp;
  const float inv = row_inv_rms(xr, cp, eps);
  scale_row(xr, w, yr, cp, inv, threadIdx.x, 32);
}

// Few rows (token-by-token decoding): a block per row, the sum of squares reduced over its warps, so one
// row is not left to a single warp's latency (~10 us for 3072 wide on the H200, against ~3).
template <class T>
__global__ void rms_norm_row_kernel(const Pack<T>* __restrict__ x, VecF w, Pack<T>* __restrict__ y, int cp,
                                    float eps) {
  constexpr int P = kPack<T>;
  __shared__ float part[kWarps];
  const Pack<T>* xr = x + int64_t(blockIdx.x) * cp;
  Pack<T>* yr = y + int64_t(blockIdx.x) * cp;
  const int t = threadIdx.y * 32 + threadIdx.x;
  float ss = 0.f;
  for (int i = t; i < cp; i += 32 * kWarps) {
    const Pack<T> a = xr[i];
#pragma unroll
    for (int e = 0; e < P; ++e) ss += to_f(a.v[e]) * to_f(a.v[e]);
  }
  ss = warp_sum(ss);
  if (threadIdx.x == 0) part[threadIdx.y] = ss;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int k = 0; k < kWarps; ++k) total += part[k];
  const float inv = rsqrtf(total / float(cp * P) + eps);
  scale_row(xr, w, yr, cp, inv, t, 32 * kWarps);
}

template <class T>
__global__ void layer_norm_kernel(const T* __restrict__ x, VecF w, VecF b, T* __restrict__ y, int64_t rows, int c,
                                  float eps) {
  const int64_t row = blockIdx.x * int64_t(kWarps) + threadIdx.y;
  if (row >= rows) return;
  const T* xr = x + row * c;
  T* yr = y + row * c;
  float s = 0.f;
  for (int i = threadIdx.x; i < c; i += 32) s += to_f(xr[i]);
  const float mean = warp_sum(s) / float(c);
  float v = 0.f;
  for (int i = threadIdx.x; i < c; i += 32) {
    const float d = to_f(xr[i]) - mean;
    v += d * d;
  }
  const float inv = rsqrtf(warp_sum(v) / float(c) + eps);
  for (int i = threadIdx.x; i < c; i += 32) {
    float o = (to_f(xr[i]) - mean) * inv;
    if (w.defined()) o *= w[i];
    if (b.defined()) o += b[i];
    yr[i] = from_f<T>(o);
  }
}

void check_vec(const Tensor& x, const Tensor& v, int64_t c, const char* op, const char* what) {
  if (!v.defined()) return;
  detail::check_same_device(x, v, op, what);
  detail::check_float(v, op, what);
  ERNIE_CHECK(v.numel() == c, op, ": ", what, " ", shape_str(v.shape()), " should have ", std::to_string(c),
              " elements");
}

}  // namespace

Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps) {
  detail::check_act(x, "rms_norm", "x");
  ERNIE_CHECK(x.ndim() >= 1, "rms_norm: x is a scalar");
  const int64_t c = x.dim(-1), rows = c ? x.numel() / c : 0;
  check_vec(x, weight, c, "rms_norm", "weight");
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (rows == 0) return y;
  cudaStream_t st = stream(detail::dev(x));
  const dim3 block(32, kWarps);
  const unsigned grid = unsigned((rows + kWarps - 1) / kWarps);
  ERNIE_DISPATCH_ACT(x.dtype(), "rms_norm", {
    if (c % kPack<T> == 0 && aligned16(x.raw()) && rows < kFewRows)
      rms_norm_row_kernel<T><<<unsigned(rows), block, 0, st>>>(x.data<Pack<T>>(), vec(weight), y.data<Pack<T>>(),
                                                               int(c / kPack<T>), eps);
    else if (c % kPack<T> == 0 && aligned16(x.raw()))
      rms_norm_vec_kernel<T><<<grid, block, 0, st>>>(x.data<Pack<T>>(), vec(weight), y.data<Pack<T>>(), rows,
                                                     int(c / kPack<T>), eps);
    else
      rms_norm_kernel<T><<<grid, block, 0, st>>>(x.data<T>(), vec(weight), y.data<T>(), rows, int(c), eps);
  });
  ERNIE_CUDA_LAUNCH("rms_norm");
  return y;
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) {
  detail::check_act(x, "layer_norm", "x");
  ERNIE_CHECK(x.ndim() >= 1, "layer_norm: x is a scalar");
  const int64_t c = x.dim(-1), rows = c ? x.numel() / c : 0;
  check_vec(x, weight, c, "layer_norm", "weight");
  check_vec(x, bias, c, "layer_norm", "bias");
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (rows == 0) return y;
  cudaStream_t st = stream(detail::dev(x));
  const dim3 block(32, kWarps);
  const unsigned grid = unsigned((rows + kWarps - 1) / kWarps);
  ERNIE_DISPATCH_ACT(x.dtype(), "layer_norm",
                     layer_norm_kernel<T><<<grid, block, 0, st>>>(x.data<T>(), vec(weight), vec(bias), y.data<T>(),
                                                                  rows, int(c), eps));
  ERNIE_CUDA_LAUNCH("layer_norm");
  return y;
}

}  // namespace ernie::cuda
