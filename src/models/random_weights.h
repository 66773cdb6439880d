// Deterministic random weights for speed tests at full size without a checkpoint (the models' random()
// constructors): the same values for the same seed whatever the machine and the number of threads.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/model_folder.h"

namespace ernie::random_weights {

uint64_t splitmix64(uint64_t x);
uint64_t name_hash(const std::string& s);  // FNV-1a

// xorshift64 (13, 7, 17); `s` must not be 0.
struct Xorshift64 {
  uint64_t s;
  float uniform() {  // [0, 1) from the top 24 bits
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return float(s >> 40) * (1.0f / 16777216.0f);
  }
};

// Half width a of U(-a, a) with standard deviation 0.02 (U(-a, a) has std a/sqrt(3)).
float half_width_std002();

// BF16 values ~ U(-a, a) with std 0.02. Chunks of 64 Ki elements each get their own stream, seeded from
// `seed` and `name`, so the values do not depend on the number of threads.
Tensor uniform_bf16(const std::string& name, const Shape& shape, uint64_t seed);
Tensor ones_bf16(const Shape& shape);

// The value rules of the models' random() constructors by tensor name (also what write_random_model
// stores), BF16 on the host: norm weights 1, everything else uniform_bf16; in the VAE the biases and the
// BatchNorm mean are 0, its variance 1, and bn.num_batches_tracked an I64 0 as in the release.
Tensor dit_tensor(const std::string& name, const Shape& shape, uint64_t seed);
Tensor mistral_tensor(const std::string& name, const Shape& shape, uint64_t seed);
Tensor vae_tensor(const std::string& name, const Shape& shape, uint64_t seed);

// A weight source (name -> host tensor) over `specs`: make(name, shape) for each tensor they name; any
// other name throws, naming `who`.
using Maker = std::function<Tensor(const std::string& name, const Shape& shape)>;
std::function<Tensor(const std::string& name)> from_specs(const std::vector<TensorSpec>& specs,
                                                          const std::string& who, Maker make);

}  // namespace ernie::random_weights
