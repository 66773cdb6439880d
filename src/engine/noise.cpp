#include "engine/noise.h"

#include <cmath>
#include <random>

#include "core/error.h"
#include "engine/rng/torch_cpu_rng.h"
#include "engine/rng/torch_cuda_rng.h"
#include "ops/ops.h"

namespace ernie {

NoiseRng parse_rng(const std::string& name, const char* flag) {
  if (name == "cpu") return NoiseRng::Cpu;
  if (name == "cuda") return NoiseRng::Cuda;
  if (name == "ernie") return NoiseRng::Ernie;
  fail(flag, " '", name.substr(0, 40), "' is not a noise generator; choose one of cpu (torch's CPU generator, the ",
       "default), cuda (torch's CUDA generator) or ernie");
}

const char* rng_name(NoiseRng r) {
  switch (r) {
    case NoiseRng::Cuda: return "cuda";
    case NoiseRng::Ernie: return "ernie";
    default: return "cpu";
  }
}

uint64_t image_seed(uint64_t seed, int b, NoiseRng rng) {
  return rng == NoiseRng::Ernie ? seed + uint64_t(b) : seed;
}

Tensor initial_noise(const Shape& shape, uint64_t seed, NoiseRng rng, DType dtype, Device device) {
  if (rng == NoiseRng::Ernie) return initial_noise(shape, seed);
  ERNIE_CHECK(shape.size() >= 1 && shape[0] >= 1, "initial_noise: bad shape ", shape_str(shape));
  const DType d = dtype == DType::BF16 ? DType::BF16 : DType::F32;  // the dtypes torch draws for our runs
  const int64_t n = shape_numel(shape);
  // On a GPU, torch's CUDA generator is drawn by torch's own kernel scheme there: bit for bit.
  if (rng == NoiseRng::Cuda && device.is_cuda()) return ops::torch_cuda_randn(n, seed, d, device).reshape(shape);
  std::vector<float> v = rng == NoiseRng::Cpu ? torch_cpu_randn(n, seed, d) : torch_cuda_randn(n, seed, d);
  return Tensor::from_vector(v, shape);
}

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
