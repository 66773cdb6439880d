// Flux2Vae with deterministic random weights, for speed tests at full size without a checkpoint.
#include <algorithm>
#include <vector>

#include "models/flux2_vae.h"
#include "models/random_weights.h"

namespace ernie {

Flux2Vae Flux2Vae::random(const VaeConfig& cfg, Device device, DType act, uint64_t seed) {
  uint64_t counter = seed;
  auto make = [&](const std::string& name, const Shape& shape) {
    const int64_t n = shape_numel(shape);
    std::vector<float> v(static_cast<size_t>(n));
    const bool norm_weight = name.find("norm") != std::string::npos && name.ends_with(".weight");
    if (name == "bn.running_var" || norm_weight) {
      std::fill(v.begin(), v.end(), 1.f);
    } else if (name == "bn.running_mean" || name.ends_with(".bias")) {
      std::fill(v.begin(), v.end(), 0.f);
    } else {
      random_weights::Xorshift64 g{random_weights::splitmix64(++counter) | 1};
      const float a = random_weights::half_width_std002();
      for (float& x : v) x = (2.f * g.uniform() - 1.f) * a;
    }
    return Tensor::from_vector(v, shape).cast(DType::BF16);
  };
  return build(cfg, device, act, random_weights::from_specs(vae_tensor_specs(cfg), "Flux2Vae::random", make),
               "Flux2Vae::random");
}

}  // namespace ernie
