// Row-wise symmetric 8-bit quantization on the GPU (ops::quantize; the CPU twin is ops/cpu/quantize.cpp,
// matched bit for bit: the same scale = max|row| / qmax, a correctly rounded division, and round-to-nearest-
// even conversion, saturating for fp8), dequantization, and the scaling epilogue of the fp8 GEMM fallback.
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cuda/common.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/quantize.h"
#include "ops/cuda/row_block.cuh"
#include "ops/shape_rules.h"

namespace ernie::cuda {

namespace {

constexpr int kThreads = 256;

template <class Q>
__device__ __forceinline__ Q encode(float v);
template <>
__device__ __forceinline__ uint8_t encode<uint8_t>(float v) {  // e4m3, nearest even, saturating
  return uint8_t(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}
template <>
__device__ __forceinline__ int8_t encode<int8_t>(float v) {
  return int8_t(__float2int_rn(fminf(127.f, fmaxf(-127.f, v))));
}
__device__ __forceinline__ float decode(uint8_t q) {  // the code's value (its constructors would convert q)
  __nv_fp8_e4m3 v;
  v.__x = q;
  return float(v);
}
__device__ __forceinline__ float decode(int8_t q) { return float(q); }

__device__ __forceinline__ float block_max(float v) {
  __shared__ float part[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
  __syncthreads();
  v = part[0];
  for (int w = 1; w < kThreads / 32; ++w) v = fmaxf(v, part[w]);
  return v;
}

// One block per row of P-element packs (P = 1 unless the row is 16-byte aligned). The row's scale is
// max|row| / qmax, or *fixed (a static scale) when given.
template <class T, class Q, int P>
__global__ void quantize_kernel(const T* __restrict__ x, Q* __restrict__ q, float* __restrict__ scale, int64_t cols,
                                float qmax, const float* __restrict__ fixed) {
  struct alignas(sizeof(T) * P) In { T v[P]; };
  struct alignas(sizeof(Q) * P) Out { Q v[P]; };
  const int64_t row = blockIdx.x, packs = cols / P;
  const In* xr = reinterpret_cast<const In*>(x + row * cols);
  Out* qr = reinterpret_cast<Out*>(q + row * cols);
  float s;
  if (fixed) {
    s = *fixed;
  } else {
    float amax = 0.f;
    for (int64_t i = threadIdx.x; i < packs; i += kThreads) {
      const In a = xr[i];
#pragma unroll
      for (int e = 0; e < P; ++e) amax = fmaxf(amax, fabsf(to_f(a.v[e])));
    }
    amax = block_max(amax);
    s = amax > 0.f ? __fdiv_rn(amax, qmax) : 1.f;
  }
  const float inv = __frcp_rn(s);
  if (threadIdx.x == 0) scale[row] = s;
  for (int64_t i = threadIdx.x; i < packs; i += kThreads) {
    const In a = xr[i];
    Out r;
#pragma unroll
    for (int e = 0; e < P; ++e) r.v[e] = encode<Q>(__fmul_rn(to_f(a.v[e]), inv));
    qr[i] = r;
  }
}

// The same for a row that fits a block's registers (row_block.cuh): each thread loads its NP packs once, so
// the row is read once and all its loads are in flight together.
template <class T, class Q, int NP>
__global__ void __launch_bounds__(kRowThreads) quantize_rows_kernel(
    const Pack<T>* __restrict__ x, Q* __restrict__ q, float* __restrict__ scale, int cp, float qmax,
    const float* __restrict__ fixed) {
  constexpr int P = kPack<T>;
  struct alignas(sizeof(Q) * P) Out { Q v[P]; };
  const int64_t row = blockIdx.x;
  Pack<T> a[NP];
#pragma unroll
  for (int j = 0; j < NP; ++j)
    if (threadIdx.x + j * blockDim.x < cp) a[j] = x[row * cp + threadIdx.x + j * blockDim.x];
  const float s = fixed ? *fixed : row_scale(block_amax(a, cp), qmax);
  const float inv = __frcp_rn(s);
  if (threadIdx.x == 0) scale[row] = s;
  Out* qr = reinterpret_cast<Out*>(q) + row * cp;
#pragma unroll
  for (int j = 0; j < NP; ++j) {
    const int i = threadIdx.x + j * blockDim.x;
    if (i >= cp) continue;
    Out r;
#pragma unroll
    for (int e = 0; e < P; ++e) r.v[e] = encode<Q>(__fmul_rn(to_f(a[j].v[e]), inv));
    qr[i] = r;
  }
}

// max(a, b) where a NaN wins (max_abs reports it).
__device__ __host__ __forceinline__ float max_nan(float a, float b) { return a != a || b != b ? NAN : fmaxf(a, b); }

// Block b's max |x| over its grid-stride share into part[b].
template <class T>
__global__ void max_abs_kernel(const T* __restrict__ x, int64_t n, float* __restrict__ part) {
  __shared__ float warp_max[kThreads / 32];
  float m = 0.f;
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < n; i += int64_t(gridDim.x) * kThreads)
    m = max_nan(m, fabsf(to_f(x[i])));
  for (int o = 16; o > 0; o >>= 1) m = max_nan(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < kThreads / 32; ++w) m = max_nan(m, warp_max[w]);
  part[blockIdx.x] = m;
}

// P codes per thread (cols % P == 0, so a pack never straddles rows).
template <class Q, class T, int P>
__global__ void dequantize_kernel(const Q* __restrict__ q, const float* __restrict__ scale, T* __restrict__ y,
                                  int64_t packs, int64_t cols) {
  struct alignas(sizeof(Q) * P) In { Q v[P]; };
  struct alignas(sizeof(T) * P) Out { T v[P]; };
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < packs; i += int64_t(gridDim.x) * blockDim.x) {
    const In a = reinterpret_cast<const In*>(q)[i];
    const float s = scale ? scale[i * P / cols] : 1.f;
    Out r;
#pragma unroll
    for (int e = 0; e < P; ++e) r.v[e] = from_f<T>(decode(a.v[e]) * s);
    reinterpret_cast<Out*>(y)[i] = r;
  }
}

template <class T>
__global__ void scale_rows_cols_kernel(T* __restrict__ y, const float* __restrict__ sx, const float* __restrict__ sw,
                                       VecF bias, int64_t n, int64_t cols) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    y[i] = from_f<T>(to_f(y[i]) * ((sx ? sx[r] : 1.f) * sw[c]) + (bias.defined() ? bias[c] : 0.f));
  }
}

template <class T, class Q>
void launch_quantize(const Tensor& x, const Tensor& q, const Tensor& scale, float qmax, const float* fixed,
                     cudaStream_t st) {
  const int64_t rows = x.dim(0), cols = x.dim(1);
  constexpr int P = 16 / sizeof(T);
  auto* xp = static_cast<const T*>(x.raw());
  auto* qp = static_cast<Q*>(q.raw());
  const RowBlock rb = row_block(cols % P == 0 ? cols / P : 0);
  if (rb.np > 0 && aligned16(xp) && reinterpret_cast<uintptr_t>(qp) % P == 0)
    ERNIE_DISPATCH_NP(rb.np, quantize_rows_kernel<T, Q, NP><<<unsigned(rows), rb.threads, 0, st>>>(
                                 reinterpret_cast<const Pack<T>*>(xp), qp, static_cast<float*>(scale.raw()),
                                 int(cols / P), qmax, fixed));
  else if (cols % P == 0 && aligned16(xp) && reinterpret_cast<uintptr_t>(qp) % P == 0)
    quantize_kernel<T, Q, P><<<unsigned(rows), kThreads, 0, st>>>(xp, qp, static_cast<float*>(scale.raw()), cols, qmax,
                                                                    fixed);
  else
    quantize_kernel<T, Q, 1><<<unsigned(rows), kThreads, 0, st>>>(xp, qp, static_cast<float*>(scale.raw()), cols, qmax,
                                                                    fixed);
  ERNIE_CUDA_LAUNCH("quantize");
}

template <class Q, class T>
void launch_dequantize(const Tensor& q, const float* scale, Tensor& y, cudaStream_t st) {
  const int64_t n = q.numel(), cols = q.dim(-1);
  auto* qp = static_cast<const Q*>(q.raw());
  auto* yp = static_cast<T*>(y.raw());
  constexpr int P = 8;
  if (cols % P == 0 && reinterpret_cast<uintptr_t>(qp) % P == 0 && reinterpret_cast<uintptr_t>(yp) % (sizeof(T) * P) == 0)
    dequantize_kernel<Q, T, P><<<detail::blocks_for(n / P, kThreads), kThreads, 0, st>>>(qp, scale, yp, n / P, cols);
  else
    dequantize_kernel<Q, T, 1><<<detail::blocks_for(n, kThreads), kThreads, 0, st>>>(qp, scale, yp, n, cols);
  ERNIE_CUDA_LAUNCH("dequantize");
}

template <class Q>
void launch_dequantize(const Tensor& q, const float* scale, Tensor& y, cudaStream_t st) {
  if (y.dtype() == DType::F32) launch_dequantize<Q, float>(q, scale, y, st);
  else launch_dequantize<Q, __nv_bfloat16>(q, scale, y, st);
}

// x's rows quantized, each with its own scale, or all with the static one (F32 [1] on x's device) when
// `fixed` is defined. A row of no elements gets scale 1 (or the static one), as on the CPU.
ops::Weight quantize_rows(const Tensor& x, DType qt, const Tensor& fixed) {
  const float qmax = ops::rules::quantize(x, qt);
  if (fixed.defined()) ops::rules::static_scale(fixed);
  ERNIE_CHECK(x.device().is_cuda(), "quantize: input is on ", x.device().str(), ", expected a CUDA device");
  if (fixed.defined()) detail::check_same_device(x, fixed, "quantize", "scale");
  const int64_t rows = x.dim(0);
  ERNIE_CHECK(rows <= INT32_MAX, "quantize: too many rows");
  Tensor q = Tensor::empty(x.shape(), qt, x.device()), scale = Tensor::empty({rows}, DType::F32, x.device());
  if (rows == 0) return {q, scale};
  cudaStream_t st = stream(detail::dev(x));
  const float* s = fixed.defined() ? fixed.data<float>() : nullptr;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    if (qt == DType::F8_E4M3) launch_quantize<T, uint8_t>(x, q, scale, qmax, s, st);
    else launch_quantize<T, int8_t>(x, q, scale, qmax, s, st);
  };
  switch (elem_type(x.dtype(), "quantize")) {
    case kF32: run(float()); break;
    case kBF16: run(__nv_bfloat16()); break;
    default: run(__half()); break;
  }
  return {q, scale};
}

}  // namespace

ops::Weight quantize(const Tensor& x, DType qt) { return quantize_rows(x, qt, Tensor()); }

ops::Weight quantize_static(const Tensor& x, DType qt, const Tensor& scale) { return quantize_rows(x, qt, scale); }

float max_abs(const Tensor& x) {
  ERNIE_CHECK(x.defined() && dtype_is_float(x.dtype()), "max_abs: x must be a float tensor");
  const int64_t n = x.numel();
  if (n == 0) return 0.f;
  const int blocks = int(std::min<int64_t>(1024, (n + kThreads - 1) / kThreads));
  Tensor part = Tensor::empty({blocks}, DType::F32, x.device());
  cudaStream_t st = stream(detail::dev(x));
  switch (elem_type(x.dtype(), "max_abs")) {
    case kF32: max_abs_kernel<float><<<blocks, kThreads, 0, st>>>(x.data<float>(), n, part.data<float>()); break;
    case kBF16:
      max_abs_kernel<__nv_bfloat16><<<blocks, kThreads, 0, st>>>(x.data<__nv_bfloat16>(), n, part.data<float>());
      break;
    default: max_abs_kernel<__half><<<blocks, kThreads, 0, st>>>(x.data<__half>(), n, part.data<float>()); break;
  }
  ERNIE_CUDA_LAUNCH("max_abs");
  const Tensor host = part.to(kCPU);
  float m = 0.f;
  for (int b = 0; b < blocks; ++b) m = max_nan(m, host.f32()[b]);
  return m;
}

Tensor dequantize_as(const Tensor& q, const Tensor& scale, DType out) {
  ERNIE_CHECK(out == DType::F32 || out == DType::BF16, "dequantize: output must be F32 or BF16");
  Tensor y = Tensor::empty(q.shape(), out, q.device());
  if (y.numel() == 0) return y;
  cudaStream_t st = stream(detail::dev(q));
  const float* s = scale.defined() ? static_cast<const float*>(scale.raw()) : nullptr;
  if (q.dtype() == DType::F8_E4M3) launch_dequantize<uint8_t>(q, s, y, st);
  else launch_dequantize<int8_t>(q, s, y, st);
  return y;
}

Tensor dequantize(const Tensor& q, const Tensor& scale, DType out) {
  if (!scale.defined()) return cast(q, out);
  ops::rules::quantized_weight(q, scale, "dequantize");
  return dequantize_as(q, scale, out);
}

void scale_rows_cols(Tensor& y, const Tensor& sx, const Tensor& sw, const Tensor& bias) {
  const int64_t n = y.numel(), cols = y.dim(-1);
  if (n == 0) return;
  cudaStream_t st = stream(detail::dev(y));
  ERNIE_DISPATCH_ACT(y.dtype(), "linear", {
    scale_rows_cols_kernel<<<detail::blocks_for(n, kThreads), kThreads, 0, st>>>(
        static_cast<T*>(y.raw()), sx.defined() ? static_cast<const float*>(sx.raw()) : nullptr, static_cast<const float*>(sw.raw()), vec(bias),
        n, cols);
  });
  ERNIE_CUDA_LAUNCH("scale_rows_cols");
}

}  // namespace ernie::cuda
