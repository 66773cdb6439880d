// ErnieDit with deterministic random weights, for speed tests at full size without a checkpoint.
#include "models/ernie_dit.h"
#include "models/random_weights.h"

namespace ernie {

ErnieDit ErnieDit::random(const DitConfig& cfg, Device device, DType act, uint64_t seed, bool stream_blocks,
                          std::optional<DType> quantize, const QuantPolicy& policy, const LoraSet& loras,
                          bool lora_at_runtime) {
  auto make = [seed](const std::string& name, const Shape& shape) { return random_weights::dit_tensor(name, shape, seed); };
  auto source = random_weights::from_specs(dit_tensor_specs(cfg), "ErnieDit::random", make);
  return build(cfg, device, act, [&](const std::string& name) { return ops::Weight(source(name)); }, stream_blocks,
               quantize, policy, loras, lora_at_runtime);
}

}  // namespace ernie
