// argmax over the last dim: the first index of the largest value; NaN is an error.
#include <cmath>

#include "core/error.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/cpu_util.h"

namespace ernie::cpu {

std::vector<int64_t> argmax(const Tensor& x) {
  detail::check_act(x, "argmax", "x");
  const int64_t n = x.dim(-1), rows = x.numel() / n;
  std::vector<int64_t> best(size_t(rows), 0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* v = x.f32() + r * n;
    int64_t& b = best[size_t(r)];
    for (int64_t i = 0; i < n; ++i) {
      ERNIE_CHECK(!std::isnan(v[i]), "argmax: row ", std::to_string(r), " holds NaN (at ", std::to_string(i),
                  "): the model produced NaN logits");
      if (v[i] > v[b]) b = i;
    }
  }
  return best;
}

}  // namespace ernie::cpu
