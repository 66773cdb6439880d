// Flux2Vae with deterministic random weights, for speed tests at full size without a checkpoint.
#include <cmath>
#include <map>

#include "core/error.h"
#include "models/flux2_vae.h"

namespace ernie {

namespace {
uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

Flux2Vae Flux2Vae::random(const VaeConfig& cfg, Device device, DType act, uint64_t seed) {
  std::map<std::string, Shape> shapes;
  for (const TensorSpec& s : vae_tensor_specs(cfg)) shapes[s.name] = s.shape;
  uint64_t counter = seed;
  return build(cfg, device, act, [&](const std::string& name) {
    auto it = shapes.find(name);
    ERNIE_CHECK(it != shapes.end(), "Flux2Vae::random: no spec for tensor ", name);
    const int64_t n = shape_numel(it->second);
    std::vector<float> v(static_cast<size_t>(n));
    const bool norm_weight = name.find("norm") != std::string::npos && name.ends_with(".weight");
    if (name == "bn.running_var" || norm_weight) {
      std::fill(v.begin(), v.end(), 1.f);
    } else if (name == "bn.running_mean" || name.ends_with(".bias")) {
      std::fill(v.begin(), v.end(), 0.f);
    } else {
      uint64_t s = splitmix64(++counter) | 1;
      const float a = 0.02f * std::sqrt(3.f);
      for (float& x : v) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x = (2.f * float(s >> 40) * (1.f / 16777216.f) - 1.f) * a;
      }
    }
    return Tensor::from_vector(v, it->second).cast(DType::BF16);
  }, "Flux2Vae::random");
}

}  // namespace ernie
