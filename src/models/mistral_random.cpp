// MistralModel with deterministic random weights: the prompt enhancer's speed test (bench-pe) at full
// size without a checkpoint.
#include "models/mistral.h"
#include "models/random_weights.h"

namespace ernie {

MistralModel MistralModel::random(const MistralConfig& cfg, Device device, DType act, uint64_t seed,
                                  bool with_lm_head, std::optional<DType> quantize, int n_layers) {
  auto make = [seed](const std::string& name, const Shape& shape) {
    return ops::Weight(random_weights::mistral_tensor(name, shape, seed));
  };
  return build(cfg, device, act, n_layers, with_lm_head, "random mistral", make, quantize);
}

TextEncoder TextEncoder::random(const MistralConfig& cfg, Device device, DType act, uint64_t seed,
                                std::optional<DType> quantize) {
  TextEncoder te;
  te.lm_ = MistralModel::random(cfg, device, act, seed, false, quantize, cfg.num_hidden_layers - 1);
  return te;
}

}  // namespace ernie
