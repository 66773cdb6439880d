// The fused producers of an fp8 GEMM input (ops::rms_norm_modulate_fp8, ops::geglu_fp8) on the CPU: row by
// row, the op's row into a buffer, then that row quantized, with the very arithmetic of the separate ops
// (row_math.h), so the result is quantize(op(...)) bit for bit without the F32 intermediate tensor.
#include <vector>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/cpu_util.h"
#include "ops/cpu/row_math.h"

namespace ernie::cpu {

namespace {

// The [rows, c] fp8 result of a row-wise op: fill(r, buffer) writes row r's values, which are quantized
// (with `fixed`, a positive static scale, else per row).
template <class Fill>
ops::Weight quantized_rows(int64_t rows, int64_t c, float fixed, Fill fill) {
  Tensor q = Tensor::empty({rows, c}, DType::F8_E4M3), scale = Tensor::empty({rows}, DType::F32);
  float* sc = scale.f32();
  uint8_t* qp = q.data<uint8_t>();
#pragma omp parallel if (detail::worth_threads(rows * c))
  {
    std::vector<float> row(static_cast<size_t>(c));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      fill(r, row.data());
      sc[r] = detail::quantize_row(DType::F8_E4M3, row.data(), c, kFp8E4m3Max, qp + r * c, fixed);
    }
  }
  return {q, scale};
}

int64_t leading_rows(const Tensor& x) {
  int64_t rows = 1;
  for (int i = 0; i + 1 < x.ndim(); ++i) rows *= x.dim(i);
  return rows;
}

}  // namespace

ops::Weight rms_norm_modulate_fp8(const Tensor& x, const Tensor& weight, float eps, const Tensor& shift,
                                  const Tensor& scale, const Tensor& static_scale) {
  const char* op = "rms_norm_modulate_fp8";
  detail::check_act(x, op, "x");
  const int64_t ss = detail::row_vector_stride(x, shift, op, "shift");
  const int64_t sc = detail::row_vector_stride(x, scale, op, "scale");
  const int64_t c = x.dim(-1), rows = leading_rows(x), seq = x.dim(0) ? rows / x.dim(0) : 1;
  const std::vector<float> w = detail::vec_f32(weight, c, op, "weight");
  const float *xp = x.f32(), *sh = shift.f32(), *scp = scale.f32();
  return quantized_rows(rows, c, detail::static_scale_value(static_scale, op), [&](int64_t r, float* o) {
    const int64_t b = r / seq;
    detail::rms_norm_row(xp + r * c, c, w.empty() ? nullptr : w.data(), eps, o);
    for (int64_t k = 0; k < c; ++k) o[k] = detail::modulate_f(o[k], sh[b * ss + k], scp[b * sc + k]);
  });
}

ops::Weight geglu_fp8(const Tensor& gate, const Tensor& up, const Tensor& static_scale) {
  detail::check_act(gate, "geglu_fp8", "gate");
  detail::check_act(up, "geglu_fp8", "up");
  ERNIE_CHECK(gate.shape() == up.shape() && gate.ndim() >= 1, "geglu_fp8: gate and up shapes differ: ",
              detail::shapes(gate, up));
  const int64_t c = gate.dim(-1), rows = leading_rows(gate);
  const float *g = gate.f32(), *u = up.f32();
  return quantized_rows(rows, c, detail::static_scale_value(static_scale, "geglu_fp8"), [&](int64_t r, float* o) {
    for (int64_t k = 0; k < c; ++k) o[k] = detail::gelu_f(g[r * c + k]) * u[r * c + k];
  });
}

}  // namespace ernie::cpu
