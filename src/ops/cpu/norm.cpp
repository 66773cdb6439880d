// Normalisations over the last dim (rms_norm, layer_norm) and GroupNorm over [B, C, *]; fp32 data,
// double accumulation of the statistics.
#include <cmath>
#include <vector>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/cpu_util.h"
#include "ops/cpu/row_math.h"
#include "ops/shape_rules.h"

namespace ernie::cpu {

namespace {

// Mean and 1/sqrt(variance + eps) of `len` values (biased variance, double accumulation; mean 0 and variance
// 0 when len is 0). each(f) calls f(value) for every value, in the same order on both passes.
struct Stats {
  double mean, inv;
};
template <class Each>
Stats mean_inv_std(int64_t len, float eps, const Each& each) {
  double s = 0;
  each([&](float a) { s += a; });
  const double mean = len ? s / double(len) : 0;
  double v = 0;
  each([&](float a) { v += (a - mean) * (a - mean); });
  return {mean, 1.0 / std::sqrt((len ? v / double(len) : 0) + double(eps))};
}

}  // namespace

Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps) {
  detail::check_act(x, "rms_norm", "x");
  ERNIE_CHECK(x.ndim() >= 1, "rms_norm: x is a scalar");
  const int64_t c = x.dim(-1), rows = c ? x.numel() / c : 0;
  std::vector<float> w = detail::vec_f32(weight, c, "rms_norm", "weight");
  Tensor y = Tensor::empty(x.shape(), DType::F32);
  const float* xp = x.f32();
  float* yp = y.f32();
#pragma omp parallel for schedule(static) if (detail::worth_threads(x.numel()))
  for (int64_t r = 0; r < rows; ++r) {
    detail::rms_norm_row(xp + r * c, c, w.empty() ? nullptr : w.data(), eps, yp + r * c);
  }
  return y;
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) {
  detail::check_act(x, "layer_norm", "x");
  ERNIE_CHECK(x.ndim() >= 1, "layer_norm: x is a scalar");
  const int64_t c = x.dim(-1), rows = c ? x.numel() / c : 0;
  std::vector<float> w = detail::vec_f32(weight, c, "layer_norm", "weight");
  std::vector<float> b = detail::vec_f32(bias, c, "layer_norm", "bias");
  Tensor y = Tensor::empty(x.shape(), DType::F32);
  const float* xp = x.f32();
  float* yp = y.f32();
#pragma omp parallel for schedule(static) if (detail::worth_threads(x.numel()))
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = xp + r * c;
    float* o = yp + r * c;
    const auto [mean, inv] = mean_inv_std(c, eps, [&](auto f) {
      for (int64_t i = 0; i < c; ++i) f(a[i]);
    });
    for (int64_t i = 0; i < c; ++i)
      o[i] = float((a[i] - mean) * inv) * (w.empty() ? 1.f : w[i]) + (b.empty() ? 0.f : b[i]);
  }
  return y;
}

Tensor group_norm(const Tensor& x, int groups, const Tensor& weight, const Tensor& bias, float eps, bool silu,
                  ops::Layout layout) {
  detail::check_act(x, "group_norm", "x");
  ops::rules::group_norm(x, groups, layout);
  // Element (n, c, i) of x, i the spatial index, sits at n * c * hw + c * cs + i * is.
  const bool nhwc = layout == ops::Layout::NHWC;
  const int64_t n = x.dim(0), c = x.dim(nhwc ? -1 : 1), hw = (n * c != 0) ? x.numel() / (n * c) : 0;
  const int64_t cs = nhwc ? 1 : hw, is = nhwc ? c : 1;
  std::vector<float> w = detail::vec_f32(weight, c, "group_norm", "weight");
  std::vector<float> b = detail::vec_f32(bias, c, "group_norm", "bias");
  const int64_t cg = c / groups, len = cg * hw;
  Tensor y = Tensor::empty(x.shape(), DType::F32);
  const float* xp = x.f32();
  float* yp = y.f32();
#pragma omp parallel for schedule(static) if (detail::worth_threads(x.numel()))
  for (int64_t bg = 0; bg < n * groups; ++bg) {
    const int64_t g = bg % groups, base = (bg / groups) * c * hw + g * cg * cs;
    const auto [mean, inv] = mean_inv_std(len, eps, [&](auto f) {
      for (int64_t ch = 0; ch < cg; ++ch)
        for (int64_t i = 0; i < hw; ++i) f(xp[base + ch * cs + i * is]);
    });
    for (int64_t ch = 0; ch < cg; ++ch) {
      const int64_t cc = g * cg + ch;
      const float sc = w.empty() ? 1.f : w[cc], sh = b.empty() ? 0.f : b[cc];
      for (int64_t i = 0; i < hw; ++i) {
        const int64_t k = base + ch * cs + i * is;
        const float t = float((xp[k] - mean) * inv) * sc + sh;
        yp[k] = silu ? t / (1.f + std::exp(-t)) : t;
      }
    }
  }
  return y;
}

}  // namespace ernie::cpu
