// Elementwise ops: activations, arithmetic, gated activations, AdaLN modulation, gated residuals and
// dtype casts. All F32 on the CPU; per-row vectors [B, C] (or [1, C]) broadcast over the sequence.
#include <cmath>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/cpu_util.h"
#include "ops/cpu/row_math.h"

namespace ernie::cpu {

namespace {

using detail::gelu_f;
using detail::silu_f;

template <class F>
Tensor unary(const Tensor& x, const char* op, F f) {
  detail::check_act(x, op, "x");
  Tensor y = Tensor::empty(x.shape(), DType::F32);
  const float* a = x.f32();
  float* o = y.f32();
  const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (detail::worth_threads(n))
  for (int64_t i = 0; i < n; ++i) o[i] = f(a[i]);
  return y;
}

template <class F>
Tensor binary(const Tensor& a, const Tensor& b, const char* op, const char* an, const char* bn, F f) {
  detail::check_act(a, op, an);
  detail::check_act(b, op, bn);
  ERNIE_CHECK(a.shape() == b.shape(), op, ": ", an, " and ", bn, " shapes differ: ", detail::shapes(a, b));
  Tensor y = Tensor::empty(a.shape(), DType::F32);
  const float* p = a.f32();
  const float* q = b.f32();
  float* o = y.f32();
  const int64_t n = a.numel();
#pragma omp parallel for schedule(static) if (detail::worth_threads(n))
  for (int64_t i = 0; i < n; ++i) o[i] = f(p[i], q[i]);
  return y;
}

}  // namespace

Tensor silu(const Tensor& x) { return unary(x, "silu", silu_f); }
Tensor gelu(const Tensor& x) { return unary(x, "gelu", gelu_f); }
Tensor scale(const Tensor& x, float s) {
  return unary(x, "scale", [s](float v) { return v * s; });
}
Tensor add(const Tensor& a, const Tensor& b) {
  return binary(a, b, "add", "a", "b", [](float p, float q) { return p + q; });
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary(a, b, "mul", "a", "b", [](float p, float q) { return p * q; });
}
Tensor swiglu(const Tensor& gate, const Tensor& up) {
  return binary(gate, up, "swiglu", "gate", "up", [](float g, float u) { return silu_f(g) * u; });
}
Tensor geglu(const Tensor& gate, const Tensor& up) {
  return binary(gate, up, "geglu", "gate", "up", [](float g, float u) { return gelu_f(g) * u; });
}

Tensor modulate(const Tensor& x, const Tensor& shift, const Tensor& scale) {
  detail::check_act(x, "modulate", "x");
  const int64_t ss = detail::row_vector_stride(x, shift, "modulate", "shift");
  const int64_t sc = detail::row_vector_stride(x, scale, "modulate", "scale");
  const int64_t b = x.dim(0), c = x.dim(-1), s = (b * c != 0) ? x.numel() / (b * c) : 0;
  Tensor y = Tensor::empty(x.shape(), DType::F32);
  const float *xp = x.f32(), *sh = shift.f32(), *scp = scale.f32();
  float* o = y.f32();
#pragma omp parallel for collapse(2) schedule(static) if (detail::worth_threads(x.numel()))
  for (int64_t i = 0; i < b; ++i)
    for (int64_t t = 0; t < s; ++t) {
      const int64_t off = (i * s + t) * c;
      for (int64_t k = 0; k < c; ++k) o[off + k] = detail::modulate_f(xp[off + k], sh[i * ss + k], scp[i * sc + k]);
    }
  return y;
}

Tensor gated_residual(const Tensor& residual, const Tensor& gate, const Tensor& y) {
  detail::check_act(residual, "gated_residual", "residual");
  detail::check_act(y, "gated_residual", "y");
  ERNIE_CHECK(residual.shape() == y.shape(), "gated_residual: residual and y shapes differ: ",
              detail::shapes(residual, y));
  const int64_t gs = detail::row_vector_stride(residual, gate, "gated_residual", "gate");
  const int64_t b = residual.dim(0), c = residual.dim(-1), s = (b * c != 0) ? residual.numel() / (b * c) : 0;
  Tensor out = Tensor::empty(residual.shape(), DType::F32);
  const float *r = residual.f32(), *g = gate.f32(), *yp = y.f32();
  float* o = out.f32();
#pragma omp parallel for collapse(2) schedule(static) if (detail::worth_threads(residual.numel()))
  for (int64_t i = 0; i < b; ++i)
    for (int64_t t = 0; t < s; ++t) {
      const int64_t off = (i * s + t) * c;
      for (int64_t k = 0; k < c; ++k) o[off + k] = r[off + k] + g[i * gs + k] * yp[off + k];
    }
  return out;
}

Tensor cast(const Tensor& x, DType dtype) {
  ERNIE_CHECK(x.defined(), "cast: x is undefined");
  ERNIE_CHECK(x.device().is_cpu(), "cast: x is on ", x.device().str(), ", expected cpu");
  ERNIE_CHECK(dtype_is_float(x.dtype()), "cast: x ", shape_str(x.shape()), " has non-float dtype ",
              dtype_name(x.dtype()));
  ERNIE_CHECK(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16, "cast: cannot cast to ",
              dtype_name(dtype), " (F32, BF16 or F16)");
  return dtype == x.dtype() ? x.clone() : x.cast(dtype);
}

}  // namespace ernie::cpu
