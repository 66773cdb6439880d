// Row-wise symmetric 8-bit quantization (ops::quantize) and its inverse, the reference the CUDA kernels
// match bit for bit: scale = max|row| / qmax, q = round-to-nearest-even(x · (1 / scale)).
#include <cmath>
#include <vector>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/cpu_util.h"
#include "ops/cpu/row_math.h"
#include "ops/shape_rules.h"

namespace ernie::cpu {

namespace {
// Every row of x quantized to qt, each with its own scale, or with `fixed` when positive (a static scale).
ops::Weight quantize_rows(const Tensor& x, DType qt, float fixed) {
  const float qmax = ops::rules::quantize(x, qt);
  ERNIE_CHECK(x.device().is_cpu(), "quantize: input is on ", x.device().str(), ", expected cpu");
  const int64_t rows = x.dim(0), cols = x.dim(1);
  Tensor q = Tensor::empty(x.shape(), qt), scale = Tensor::empty({rows}, DType::F32);
  const size_t esz = dtype_size(x.dtype());
  const char* src = static_cast<const char*>(x.raw());
  float* sc = scale.f32();
#pragma omp parallel if (detail::worth_threads(rows * cols))
  {
    std::vector<float> row(static_cast<size_t>(cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      convert_to_f32(x.dtype(), src + size_t(r * cols) * esz, row.data(), size_t(cols));
      sc[r] = detail::quantize_row(qt, row.data(), cols, qmax, static_cast<char*>(q.raw()) + r * cols, fixed);
    }
  }
  return {q, scale};
}
}  // namespace

ops::Weight quantize(const Tensor& x, DType qt) { return quantize_rows(x, qt, 0.f); }

ops::Weight quantize_static(const Tensor& x, DType qt, const Tensor& scale) {
  ops::rules::static_scale(scale);  // defined: an undefined one would mean a scale per row
  return quantize_rows(x, qt, detail::static_scale_value(scale, "quantize"));
}

float max_abs(const Tensor& x) {
  ERNIE_CHECK(x.defined() && dtype_is_float(x.dtype()), "max_abs: x must be a float tensor");
  const Tensor f = x.to_f32();
  const float* p = f.f32();
  float m = 0.f;
  for (int64_t i = 0; i < f.numel(); ++i) {
    if (std::isnan(p[i])) return p[i];
    m = std::fmax(m, std::fabs(p[i]));
  }
  return m;
}

void convert_quantized(DType qt, const void* q, float* out, size_t n) {
  if (qt == DType::I8) {
    const int8_t* p = static_cast<const int8_t*>(q);
    for (size_t i = 0; i < n; ++i) out[i] = float(p[i]);
  } else {
    convert_to_f32(qt, q, out, n);
  }
}

Tensor dequantize(const Tensor& q, const Tensor& scale, DType out) {
  if (out != DType::F32) return cast(dequantize(q, scale), out);
  if (!scale.defined()) return q.to_f32();
  ops::rules::quantized_weight(q, scale, "dequantize");
  const int64_t rows = q.dim(0), cols = q.dim(1);
  Tensor y = Tensor::empty(q.shape(), DType::F32);
  const float* sc = scale.f32();
  float* o = y.f32();
#pragma omp parallel for schedule(static) if (detail::worth_threads(rows * cols))
  for (int64_t r = 0; r < rows; ++r) {
    convert_quantized(q.dtype(), static_cast<const char*>(q.raw()) + r * cols, o + r * cols, size_t(cols));
    for (int64_t c = 0; c < cols; ++c) o[r * cols + c] *= sc[r];
  }
  return y;
}

}  // namespace ernie::cpu
