#include "engine/noise.h"

#include <cmath>
#include <random>

#include "core/error.h"

namespace ernie {

Tensor initial_noise(const Shape& shape, uint64_t seed) {
  ERNIE_CHECK(shape.size() >= 1 && shape[0] >= 1, "initial_noise: bad shape ", shape_str(shape));
  Tensor t = Tensor::empty(shape, DType::F32);
  const int64_t per = t.numel() / shape[0];
  float* p = t.f32();
  for (int64_t b = 0; b < shape[0]; ++b) {
    std::mt19937_64 rng(seed + uint64_t(b));
    // 53-bit uniforms in (0, 1]; Box-Muller gives two normals per pair of uniforms.
    auto uniform = [&] { return (double(rng() >> 11) + 1.0) * (1.0 / 9007199254740992.0); };
    float* q = p + b * per;
    for (int64_t i = 0; i < per; i += 2) {
      double r = std::sqrt(-2.0 * std::log(uniform())), th = 2.0 * M_PI * uniform();
      q[i] = float(r * std::cos(th));
      if (i + 1 < per) q[i + 1] = float(r * std::sin(th));
    }
  }
  return t;
}

}  // namespace ernie
