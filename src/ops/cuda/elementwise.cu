// Elementwise ops: activations, arithmetic, gated activations (geglu also quantized per row to fp8 for the
// next GEMM: geglu_fp8), AdaLN modulation, gated residuals and casts. fp32 math on F32 or BF16 storage;
// per-row vectors [B or 1, C] broadcast over the sequence.
#include <cmath>

#include "ops/cuda/common.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/row_block.cuh"

namespace ernie::cuda {

namespace {

constexpr int kThreads = 256;


enum class Unary { Silu, Gelu, Scale, Clamp };
enum class Binary { Add, Mul, Swiglu, Geglu };

template <class T, Unary U>
__global__ void unary_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, float s, float s2) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float v = to_f(x[i]);
    if constexpr (U == Unary::Silu) v = silu_f(v);
    else if constexpr (U == Unary::Gelu) v = gelu_f(v);
    else if constexpr (U == Unary::Scale) v *= s;
    else v = v != v ? v : fminf(fmaxf(v, s), s2);
    y[i] = from_f<T>(v);
  }
}

template <class T, Unary U>
__global__ void unary_vec_kernel(const Pack<T>* __restrict__ x, Pack<T>* __restrict__ y, int64_t n, float s,
                                 float s2) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const Pack<T> a = x[i];
    Pack<T> r;
#pragma unroll
    for (int k = 0; k < kPack<T>; ++k) {
      float v = to_f(a.v[k]);
      if constexpr (U == Unary::Silu) v = silu_f(v);
      else if constexpr (U == Unary::Gelu) v = gelu_f(v);
      else if constexpr (U == Unary::Scale) v *= s;
      else v = v != v ? v : fminf(fmaxf(v, s), s2);  // NaN stays NaN, as torch.clamp
      r.v[k] = from_f<T>(v);
    }
    y[i] = r;
  }
}

template <Binary B>
__device__ __forceinline__ float binary_f(float p, float q) {
  if constexpr (B == Binary::Add) return p + q;
  else if constexpr (B == Binary::Mul) return p * q;
  else if constexpr (B == Binary::Swiglu) return silu_f(p) * q;
  else return gelu_f(p) * q;
}

template <class T, Binary B>
__global__ void binary_vec_kernel(const Pack<T>* __restrict__ a, const Pack<T>* __restrict__ b, Pack<T>* __restrict__ y,
                                  int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const Pack<T> p = a[i], q = b[i];
    Pack<T> r;
#pragma unroll
    for (int k = 0; k < kPack<T>; ++k) r.v[k] = from_f<T>(binary_f<B>(to_f(p.v[k]), to_f(q.v[k])));
    y[i] = r;
  }
}

// geglu of one row of gate/up [rows, C] per block (16-byte packs), rounded to T as geglu stores it and staged
// in shared memory, then quantized per row to fp8 (row_block.cuh): quantize(geglu(gate, up)) bit for bit
// (with `fixed`, every row with the static scale *fixed).
// Staging in shared memory rather than registers keeps eight 256-thread blocks (64 warps) per SM, so loads,
// erf math and stores overlap: 100 us for [4296, 12288] bf16 on the H200 against 140 us with the row in
// registers (CudaPerf.DISABLED_FusedFp8Producers).
constexpr int kGegluThreads = 256;
template <class T>
__global__ void __launch_bounds__(kGegluThreads) geglu_fp8_kernel(
    const Pack<T>* __restrict__ gate, const Pack<T>* __restrict__ up, Codes<T>* __restrict__ q,
    float* __restrict__ qs, const float* __restrict__ fixed, int cp) {
  extern __shared__ __align__(16) unsigned char staged_bytes[];
  Pack<T>* h = reinterpret_cast<Pack<T>*>(staged_bytes);
  const int64_t row = blockIdx.x;
  float amax = 0.f;
#pragma unroll 2
  for (int i = threadIdx.x; i < cp; i += kGegluThreads) {
    Pack<T> g = gate[row * cp + i];
    const Pack<T> u = up[row * cp + i];
#pragma unroll
    for (int e = 0; e < kPack<T>; ++e) {
      g.v[e] = from_f<T>(binary_f<Binary::Geglu>(to_f(g.v[e]), to_f(u.v[e])));
      amax = fmaxf(amax, fabsf(to_f(g.v[e])));
    }
    h[i] = g;  // read back below by this same thread
  }
  const float s = fixed ? *fixed : fp8_row_scale(block_reduce(amax, MaxOp()));
  if (threadIdx.x == 0) qs[row] = s;
  const float inv = __frcp_rn(s);
  for (int i = threadIdx.x; i < cp; i += kGegluThreads) {
    const Pack<T> r = h[i];
    Codes<T> c;
#pragma unroll
    for (int e = 0; e < kPack<T>; ++e) c.v[e] = fp8_code(to_f(r.v[e]), inv);
    q[row * cp + i] = c;
  }
}

// Row-vector ops with the vectors in the activation dtype: packs along C (C % pack == 0).
template <class T>
__global__ void modulate_vec_kernel(const Pack<T>* __restrict__ x, const Pack<T>* __restrict__ shift,
                                    const Pack<T>* __restrict__ scale, Pack<T>* __restrict__ y, int64_t cp,
                                    int64_t seq, int64_t ss, int64_t sc) {
  const int64_t row = blockIdx.x, b = row / seq;
  for (int64_t k = threadIdx.x; k < cp; k += blockDim.x) {
    const Pack<T> a = x[row * cp + k], sh = shift[b * ss + k], s = scale[b * sc + k];
    Pack<T> r;
#pragma unroll
    for (int e = 0; e < kPack<T>; ++e) r.v[e] = from_f<T>(to_f(a.v[e]) * (1.f + to_f(s.v[e])) + to_f(sh.v[e]));
    y[row * cp + k] = r;
  }
}

template <class T>
__global__ void gated_residual_vec_kernel(const Pack<T>* __restrict__ res, const Pack<T>* __restrict__ gate,
                                          const Pack<T>* __restrict__ y, Pack<T>* __restrict__ out, int64_t cp,
                                          int64_t seq, int64_t gs) {
  const int64_t row = blockIdx.x, b = row / seq;
  for (int64_t k = threadIdx.x; k < cp; k += blockDim.x) {
    const Pack<T> r = res[row * cp + k], g = gate[b * gs + k], v = y[row * cp + k];
    Pack<T> o;
#pragma unroll
    for (int e = 0; e < kPack<T>; ++e) o.v[e] = from_f<T>(to_f(r.v[e]) + to_f(g.v[e]) * to_f(v.v[e]));
    out[row * cp + k] = o;
  }
}

template <class T, Binary B>
__global__ void binary_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float p = to_f(a[i]), q = to_f(b[i]);
    float v;
    if constexpr (B == Binary::Add) v = p + q;
    else if constexpr (B == Binary::Mul) v = p * q;
    else if constexpr (B == Binary::Swiglu) v = silu_f(p) * q;
    else v = gelu_f(p) * q;
    y[i] = from_f<T>(v);
  }
}

// x [rows = B*S, C], one block per row: y = x * (1 + scale[b]) + shift[b]  (row strides ss/sc: C or 0).
template <class T>
__global__ void modulate_kernel(const T* __restrict__ x, VecF shift, VecF scale, T* __restrict__ y, int64_t c,
                                int64_t seq, int64_t ss, int64_t sc) {
  const int64_t row = blockIdx.x, b = row / seq;
  const T* xr = x + row * c;
  T* yr = y + row * c;
  for (int64_t k = threadIdx.x; k < c; k += blockDim.x)
    yr[k] = from_f<T>(to_f(xr[k]) * (1.f + scale[b * sc + k]) + shift[b * ss + k]);
}

// out = residual + gate[b] * y, one block per row.
template <class T>
__global__ void gated_residual_kernel(const T* __restrict__ r, VecF gate, const T* __restrict__ y, T* __restrict__ out,
                                      int64_t c, int64_t seq, int64_t gs) {
  const int64_t row = blockIdx.x, b = row / seq, off = row * c;
  for (int64_t k = threadIdx.x; k < c; k += blockDim.x)
    out[off + k] = from_f<T>(to_f(r[off + k]) + gate[b * gs + k] * to_f(y[off + k]));
}

template <class S, class D>
__global__ void cast_kernel(const S* __restrict__ x, D* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = from_f<D>(to_f(x[i]));
}

template <Unary U>
Tensor unary(const Tensor& x, const char* op, float s = 0.f, float s2 = 0.f) {
  detail::check_act(x, op, "x");
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  const int64_t n = x.numel();
  if (n == 0) return y;
  cudaStream_t st = stream(detail::dev(x));
  ERNIE_DISPATCH_ACT(x.dtype(), op, {
    if (n % kPack<T> == 0 && aligned16(x.raw()))
      unary_vec_kernel<T, U><<<detail::blocks_for(n / kPack<T>, kThreads), kThreads, 0, st>>>(
          x.data<Pack<T>>(), y.data<Pack<T>>(), n / kPack<T>, s, s2);
    else
      unary_kernel<T, U><<<detail::blocks_for(n, kThreads), kThreads, 0, st>>>(x.data<T>(), y.data<T>(), n, s, s2);
  });
  ERNIE_CUDA_LAUNCH(op);
  return y;
}

template <Binary B>
Tensor binary(const Tensor& a, const Tensor& b, const char* op, const char* an, const char* bn) {
  detail::check_act(a, op, an);
  detail::check_act(b, op, bn);
  detail::check_same_device(a, b, op, bn);
  ERNIE_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype(), op, ": ", an, " and ", bn, " differ: ",
              detail::shapes(a, b), " ", dtype_name(a.dtype()), "/", dtype_name(b.dtype()));
  Tensor y = Tensor::empty(a.shape(), a.dtype(), a.device());
  const int64_t n = a.numel();
  if (n == 0) return y;
  cudaStream_t st = stream(detail::dev(a));
  ERNIE_DISPATCH_ACT(a.dtype(), op, {
    if (n % kPack<T> == 0 && aligned16(a.raw()) && aligned16(b.raw()))
      binary_vec_kernel<T, B><<<detail::blocks_for(n / kPack<T>, kThreads), kThreads, 0, st>>>(
          a.data<Pack<T>>(), b.data<Pack<T>>(), y.data<Pack<T>>(), n / kPack<T>);
    else
      binary_kernel<T, B><<<detail::blocks_for(n, kThreads), kThreads, 0, st>>>(a.data<T>(), b.data<T>(), y.data<T>(), n);
  });
  ERNIE_CUDA_LAUNCH(op);
  return y;
}

}  // namespace

Tensor silu(const Tensor& x) { return unary<Unary::Silu>(x, "silu"); }
Tensor gelu(const Tensor& x) { return unary<Unary::Gelu>(x, "gelu"); }
Tensor scale(const Tensor& x, float s) { return unary<Unary::Scale>(x, "scale", s); }
Tensor clamp(const Tensor& x, float lo, float hi) {
  ERNIE_CHECK(!(lo > hi), "clamp: lo ", std::to_string(lo), " > hi ", std::to_string(hi));
  return unary<Unary::Clamp>(x, "clamp", lo, hi);
}
Tensor add(const Tensor& a, const Tensor& b) { return binary<Binary::Add>(a, b, "add", "a", "b"); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary<Binary::Mul>(a, b, "mul", "a", "b"); }
Tensor swiglu(const Tensor& gate, const Tensor& up) { return binary<Binary::Swiglu>(gate, up, "swiglu", "gate", "up"); }
Tensor geglu(const Tensor& gate, const Tensor& up) { return binary<Binary::Geglu>(gate, up, "geglu", "gate", "up"); }

ops::Weight geglu_fp8(const Tensor& gate, const Tensor& up, const Tensor& static_scale) {
  const char* op = "geglu_fp8";
  detail::check_act(gate, op, "gate");
  detail::check_act(up, op, "up");
  detail::check_same_device(gate, up, op, "up");
  ERNIE_CHECK(gate.shape() == up.shape() && gate.dtype() == up.dtype() && gate.ndim() >= 1, op,
              ": gate and up differ: ", detail::shapes(gate, up), " ", dtype_name(gate.dtype()), "/",
              dtype_name(up.dtype()));
  const int64_t c = gate.dim(-1);
  int64_t rows = 1;
  for (int i = 0; i + 1 < gate.ndim(); ++i) rows *= gate.dim(i);
  const int P = gate.dtype() == DType::F32 ? kPack<float> : kPack<__nv_bfloat16>;
  const size_t staged = size_t(c) * dtype_size(gate.dtype());  // within the default 48 KiB with room to spare
  if (c == 0 || c % P || staged > 40 * 1024 || rows == 0 || rows > INT32_MAX || !aligned16(gate.raw()) ||
      !aligned16(up.raw())) {
    const Tensor y = geglu(gate, up).reshape({rows, c});
    return static_scale.defined() ? quantize_static(y, DType::F8_E4M3, static_scale) : quantize(y, DType::F8_E4M3);
  }
  if (static_scale.defined()) detail::check_same_device(gate, static_scale, op, "static_scale");
  ops::Weight q(Tensor::empty({rows, c}, DType::F8_E4M3, gate.device()), Tensor::empty({rows}, DType::F32, gate.device()));
  cudaStream_t st = stream(detail::dev(gate));
  ERNIE_DISPATCH_ACT(gate.dtype(), op, {
    geglu_fp8_kernel<T><<<unsigned(rows), kGegluThreads, staged, st>>>(gate.data<Pack<T>>(), up.data<Pack<T>>(),
                                                                       q.w.data<Codes<T>>(), q.scale.data<float>(),
                                                                       static_scale.defined() ? static_scale.data<float>() : nullptr,
                                                                       int(c / kPack<T>));
  });
  ERNIE_CUDA_LAUNCH(op);
  return q;
}

Tensor modulate(const Tensor& x, const Tensor& shift, const Tensor& scale) {
  detail::check_act(x, "modulate", "x");
  const int64_t ss = detail::row_vector_stride(x, shift, "modulate", "shift");
  const int64_t sc = detail::row_vector_stride(x, scale, "modulate", "scale");
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  const int64_t n = x.numel(), c = x.dim(-1), b = x.dim(0);
  if (n == 0) return y;
  cudaStream_t st = stream(detail::dev(x));
  ERNIE_DISPATCH_ACT(x.dtype(), "modulate", {
    constexpr int P = kPack<T>;
    if (c % P == 0 && shift.dtype() == x.dtype() && scale.dtype() == x.dtype() && aligned16(x.raw()) &&
        aligned16(shift.raw()) && aligned16(scale.raw()))
      modulate_vec_kernel<T><<<unsigned(n / c), kThreads, 0, st>>>(x.data<Pack<T>>(), shift.data<Pack<T>>(),
                                                                   scale.data<Pack<T>>(), y.data<Pack<T>>(), c / P,
                                                                   n / c / b, ss / P, sc / P);
    else
      modulate_kernel<T><<<unsigned(n / c), kThreads, 0, st>>>(x.data<T>(), vec(shift), vec(scale), y.data<T>(), c,
                                                               n / c / b, ss, sc);
  });
  ERNIE_CUDA_LAUNCH("modulate");
  return y;
}

Tensor gated_residual(const Tensor& residual, const Tensor& gate, const Tensor& y) {
  detail::check_act(residual, "gated_residual", "residual");
  detail::check_act(y, "gated_residual", "y");
  detail::check_same_device(residual, y, "gated_residual", "y");
  ERNIE_CHECK(residual.shape() == y.shape() && residual.dtype() == y.dtype(),
              "gated_residual: residual and y differ: ", detail::shapes(residual, y));
  const int64_t gs = detail::row_vector_stride(residual, gate, "gated_residual", "gate");
  Tensor out = Tensor::empty(residual.shape(), residual.dtype(), residual.device());
  const int64_t n = residual.numel(), c = residual.dim(-1), b = residual.dim(0);
  if (n == 0) return out;
  cudaStream_t st = stream(detail::dev(residual));
  ERNIE_DISPATCH_ACT(residual.dtype(), "gated_residual", {
    constexpr int P = kPack<T>;
    if (c % P == 0 && gate.dtype() == residual.dtype() && aligned16(residual.raw()) && aligned16(gate.raw()) &&
        aligned16(y.raw()))
      gated_residual_vec_kernel<T><<<unsigned(n / c), kThreads, 0, st>>>(
          residual.data<Pack<T>>(), gate.data<Pack<T>>(), y.data<Pack<T>>(), out.data<Pack<T>>(), c / P, n / c / b,
          gs / P);
    else
      gated_residual_kernel<T><<<unsigned(n / c), kThreads, 0, st>>>(residual.data<T>(), vec(gate), y.data<T>(),
                                                                     out.data<T>(), c, n / c / b, gs);
  });
  ERNIE_CUDA_LAUNCH("gated_residual");
  return out;
}

namespace {
template <class S>
void cast_from(const Tensor& x, Tensor& y, cudaStream_t st) {
  const int64_t n = x.numel();
  const unsigned g = detail::blocks_for(n, kThreads);
  switch (y.dtype()) {
    case DType::F32: cast_kernel<S, float><<<g, kThreads, 0, st>>>(x.data<S>(), y.data<float>(), n); break;
    case DType::BF16:
      cast_kernel<S, __nv_bfloat16><<<g, kThreads, 0, st>>>(x.data<S>(), y.data<__nv_bfloat16>(), n);
      break;
    default: cast_kernel<S, __half><<<g, kThreads, 0, st>>>(x.data<S>(), y.data<__half>(), n); break;
  }
}
}  // namespace

Tensor cast(const Tensor& x, DType dtype) {
  ERNIE_CHECK(x.defined(), "cast: x is undefined");
  ERNIE_CHECK(x.device().is_cuda(), "cast: x is on ", x.device().str(), ", expected a CUDA device");
  elem_type(x.dtype(), "cast");
  elem_type(dtype, "cast");
  if (dtype == x.dtype()) return x;
  Tensor y = Tensor::empty(x.shape(), dtype, x.device());
  if (x.numel() == 0) return y;
  cudaStream_t st = stream(detail::dev(x));
  switch (x.dtype()) {
    case DType::F32: cast_from<float>(x, y, st); break;
    case DType::BF16: cast_from<__nv_bfloat16>(x, y, st); break;
    default: cast_from<__half>(x, y, st); break;
  }
  ERNIE_CUDA_LAUNCH("cast");
  return y;
}

}  // namespace ernie::cuda
