// Flux2Vae with deterministic random weights, for speed tests at full size without a checkpoint.
#include "models/flux2_vae.h"
#include "models/random_weights.h"

namespace ernie {

Flux2Vae Flux2Vae::random(const VaeConfig& cfg, Device device, DType act, uint64_t seed, ops::Layout decode_layout) {
  auto make = [seed](const std::string& name, const Shape& shape) { return random_weights::vae_tensor(name, shape, seed); };
  return build(cfg, device, act, random_weights::from_specs(vae_tensor_specs(cfg), "Flux2Vae::random", make),
               "Flux2Vae::random", decode_layout);
}

}  // namespace ernie
