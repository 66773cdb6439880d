// ops::clamp on the CPU: bounds applied elementwise, values inside unchanged, NaN kept, bad bounds rejected.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "ops/ops.h"

using namespace ernie;

TEST(OpClamp, ClampsElementwise) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const Tensor x = Tensor::from_vector({-50.f, -30.f, -1.5f, 0.f, 19.99f, 20.f, 1e9f, inf, -inf, nan}, {2, 5});
  const std::vector<float> y = ops::clamp(x, -30.f, 20.f).to_vector();
  const std::vector<float> want = {-30.f, -30.f, -1.5f, 0.f, 19.99f, 20.f, 20.f, 20.f, -30.f};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(y[i], want[i]) << i;
  EXPECT_TRUE(std::isnan(y[9]));
  EXPECT_EQ(ops::clamp(x, -30.f, 20.f).shape(), x.shape());
  EXPECT_THROW(ops::clamp(x, 1.f, -1.f), Error);
}
