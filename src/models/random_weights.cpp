#include "models/random_weights.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"

namespace ernie::random_weights {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t name_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

float half_width_std002() { return 0.02f * std::sqrt(3.0f); }

Tensor uniform_bf16(const std::string& name, const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::BF16);
  uint16_t* p = t.data<uint16_t>();
  const int64_t n = t.numel();
  constexpr int64_t kChunk = 1 << 16;
  const float half_width = half_width_std002();
  const uint64_t base = splitmix64(seed ^ name_hash(name));
#pragma omp parallel for schedule(static) if (n >= (int64_t(1) << 20))
  for (int64_t c = 0; c < (n + kChunk - 1) / kChunk; ++c) {
    Xorshift64 g{splitmix64(base + uint64_t(c)) | 1};
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) p[i] = f32_to_bf16((2.0f * g.uniform() - 1.0f) * half_width);
  }
  return t;
}

Tensor ones_bf16(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::BF16);
  std::fill(t.data<uint16_t>(), t.data<uint16_t>() + t.numel(), f32_to_bf16(1.0f));
  return t;
}

Tensor dit_tensor(const std::string& name, const Shape& shape, uint64_t seed) {
  const bool is_norm = name.ends_with("ln.weight") || name.ends_with("norm_q.weight") || name.ends_with("norm_k.weight");
  return is_norm ? ones_bf16(shape) : uniform_bf16(name, shape, seed);
}

Tensor mistral_tensor(const std::string& name, const Shape& shape, uint64_t seed) {
  return name.ends_with("norm.weight") ? ones_bf16(shape) : uniform_bf16(name, shape, seed);
}

Tensor vae_tensor(const std::string& name, const Shape& shape, uint64_t seed) {
  if (name == "bn.num_batches_tracked") {
    Tensor t = Tensor::empty(shape, DType::I64);
    std::fill(t.data<int64_t>(), t.data<int64_t>() + t.numel(), int64_t(0));
    return t;
  }
  const bool norm_weight = name.find("norm") != std::string::npos && name.ends_with(".weight");
  if (name == "bn.running_var" || norm_weight) return ones_bf16(shape);
  if (name == "bn.running_mean" || name.ends_with(".bias")) {
    Tensor t = Tensor::empty(shape, DType::BF16);
    std::fill(t.data<uint16_t>(), t.data<uint16_t>() + t.numel(), f32_to_bf16(0.f));
    return t;
  }
  return uniform_bf16(name, shape, seed);
}

std::function<Tensor(const std::string& name)> from_specs(const std::vector<TensorSpec>& specs,
                                                          const std::string& who, Maker make) {
  std::map<std::string, Shape> shapes;
  for (const TensorSpec& s : specs) shapes[s.name] = s.shape;
  return [shapes = std::move(shapes), who, make = std::move(make)](const std::string& name) {
    auto it = shapes.find(name);
    ERNIE_CHECK(it != shapes.end(), who, ": no spec for tensor ", name);
    return make(name, it->second);
  };
}

}  // namespace ernie::random_weights
