// The initial noise of a generation, from a seed. Documented so a run is reproducible across machines and
// builds; it does not reproduce torch's generator (diffusers' randn_tensor): pass init latents for that.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace ernie {

// Standard normal F32 on the host. Image b of the batch (dim 0) draws its values in row-major order from
// std::mt19937_64 seeded with seed + b: 53-bit uniforms u in (0, 1], pairs (u1, u2) through Box-Muller
// (r = sqrt(-2 ln u1); r cos(2 pi u2), r sin(2 pi u2)), so image b alone with seed + b gives the same noise.
Tensor initial_noise(const Shape& shape, uint64_t seed);

}  // namespace ernie
