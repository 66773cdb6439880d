// ErnieDit with deterministic random weights, for speed tests at full size without a checkpoint.
#include "models/ernie_dit.h"
#include "models/random_weights.h"

namespace ernie {

ErnieDit ErnieDit::random(const DitConfig& cfg, Device device, DType act, uint64_t seed, bool stream_blocks) {
  auto make = [seed](const std::string& name, const Shape& shape) { return random_weights::dit_tensor(name, shape, seed); };
  return build(cfg, device, act, random_weights::from_specs(dit_tensor_specs(cfg), "ErnieDit::random", make),
               stream_blocks);
}

}  // namespace ernie
