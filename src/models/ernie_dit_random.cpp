// ErnieDit with deterministic random weights, for speed tests at full size without a checkpoint.
#include "models/ernie_dit.h"
#include "models/random_weights.h"

namespace ernie {

ErnieDit ErnieDit::random(const DitConfig& cfg, Device device, DType act, uint64_t seed, bool stream_blocks,
                          std::optional<DType> quantize, const QuantPolicy& policy) {
  // Norm weights are 1 (as initialised), everything else uniform with standard deviation 0.02.
  auto make = [seed](const std::string& name, const Shape& shape) {
    const bool is_norm = name.ends_with("ln.weight") || name.ends_with("norm_q.weight") ||
                         name.ends_with("norm_k.weight");
    return is_norm ? random_weights::ones_bf16(shape) : random_weights::uniform_bf16(name, shape, seed);
  };
  auto source = random_weights::from_specs(dit_tensor_specs(cfg), "ErnieDit::random", make);
  return build(cfg, device, act, [&](const std::string& name) { return ops::Weight(source(name)); }, stream_blocks,
               quantize, policy);
}

}  // namespace ernie
