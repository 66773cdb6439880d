// Internal helpers of the CPU backend: input checks with messages that name the op and the shapes,
// and small-vector conversion of weights (any float dtype) to f32.
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/shape_rules.h"

namespace ernie::cpu::detail {

// Threads only pay off on enough work: a parallel region costs microseconds (far more on a loaded machine),
// so small ops run on the calling thread. `work` is roughly the number of inner-loop operations.
constexpr int64_t kParallelWork = int64_t(1) << 18;
inline bool worth_threads(int64_t work) { return work >= kParallelWork; }

// A static activation scale (ops::quantize(x, q, scale), the fp8 producers) as its value: one finite positive F32
// on the CPU. 0 when undefined: each row then takes its own (detail::quantize_row).
inline float static_scale_value(const Tensor& scale, const char* op) {
  if (!scale.defined()) return 0.f;
  ops::rules::static_scale(scale);
  ERNIE_CHECK(scale.device().is_cpu(), op, ": the static scale is on ", scale.device().str(), ", expected cpu");
  const float s = scale.f32()[0];
  ERNIE_CHECK(std::isfinite(s) && s > 0.f, op, ": the static scale must be finite and positive, got ", std::to_string(s));
  return s;
}

// An activation: defined, on the CPU, F32.
inline void check_act(const Tensor& x, const char* op, const char* what) {
  ERNIE_CHECK(x.defined(), op, ": ", what, " is undefined");
  ERNIE_CHECK(x.device().is_cpu(), op, ": ", what, " is on ", x.device().str(), ", expected cpu");
  ERNIE_CHECK(x.dtype() == DType::F32, op, ": ", what, " ", shape_str(x.shape()), " has dtype ",
              dtype_name(x.dtype()), "; the CPU backend computes in F32 (cast it first)");
}

// A weight: defined, on the CPU, F32, BF16 or F16.
inline void check_weight(const Tensor& w, const char* op, const char* what) {
  ERNIE_CHECK(w.defined(), op, ": ", what, " is undefined");
  ERNIE_CHECK(w.device().is_cpu(), op, ": ", what, " is on ", w.device().str(), ", expected cpu");
  ERNIE_CHECK(w.dtype() == DType::F32 || w.dtype() == DType::BF16 || w.dtype() == DType::F16, op, ": ", what, " ",
              shape_str(w.shape()), " has dtype ", dtype_name(w.dtype()), " (expected F32, BF16 or F16)");
}

// An optional per-channel vector of length n (weight/bias), returned as f32 values (empty if undefined).
inline std::vector<float> vec_f32(const Tensor& v, int64_t n, const char* op, const char* what) {
  if (!v.defined()) return {};
  check_weight(v, op, what);
  ERNIE_CHECK(v.numel() == n, op, ": ", what, " ", shape_str(v.shape()), " should have ", std::to_string(n),
              " elements");
  std::vector<float> out(static_cast<size_t>(n));
  convert_to_f32(v.dtype(), v.raw(), out.data(), size_t(n));
  return out;
}

// x [B, ..., C] with a per-row vector v [B or 1, C] (any shape with those leading/trailing sizes).
// Returns the stride (in floats) between rows of v: C, or 0 when it broadcasts over B.
inline int64_t row_vector_stride(const Tensor& x, const Tensor& v, const char* op, const char* vn) {
  check_act(v, op, vn);
  return ops::rules::row_vector_stride(x, v, op, vn);
}

inline std::string shapes(const Tensor& a, const Tensor& b) {
  return shape_str(a.shape()) + " and " + shape_str(b.shape());
}

}  // namespace ernie::cpu::detail
