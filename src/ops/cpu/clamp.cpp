// clamp: min(max(x, lo), hi) elementwise in F32, NaN propagated as torch.clamp does.
#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/cpu_util.h"

namespace ernie::cpu {

Tensor clamp(const Tensor& x, float lo, float hi) {
  detail::check_act(x, "clamp", "x");
  ERNIE_CHECK(!(lo > hi), "clamp: lo ", std::to_string(lo), " > hi ", std::to_string(hi));
  Tensor y = Tensor::empty(x.shape(), DType::F32);
  const float* a = x.f32();
  float* o = y.f32();
  const int64_t n = x.numel();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) o[i] = std::isnan(a[i]) ? a[i] : std::min(std::max(a[i], lo), hi);
  return y;
}

}  // namespace ernie::cpu
