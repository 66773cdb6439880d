// ErnieDit with deterministic random weights, for speed tests at full size without a checkpoint.
#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "models/ernie_dit.h"

namespace ernie {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t name_hash(const std::string& s) {  // FNV-1a
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// BF16 tensor: norm weights are 1 (as initialised), everything else uniform with standard deviation 0.02.
// Chunks of 64 Ki elements each get their own xorshift stream, so the result does not depend on threads.
Tensor random_bf16(const std::string& name, const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::BF16);
  uint16_t* p = t.data<uint16_t>();
  const int64_t n = t.numel();
  const bool is_norm = name.ends_with("ln.weight") || name.ends_with("norm_q.weight") ||
                       name.ends_with("norm_k.weight");
  if (is_norm) {
    const uint16_t one = f32_to_bf16(1.0f);
    for (int64_t i = 0; i < n; ++i) p[i] = one;
    return t;
  }
  constexpr int64_t kChunk = 1 << 16;
  const float half_width = 0.02f * std::sqrt(3.0f);  // U(-a, a) has std a/sqrt(3)
  const uint64_t base = splitmix64(seed ^ name_hash(name));
#pragma omp parallel for schedule(static) if (n >= (int64_t(1) << 20))
  for (int64_t c = 0; c < (n + kChunk - 1) / kChunk; ++c) {
    uint64_t s = splitmix64(base + uint64_t(c)) | 1;
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      const float u = float(s >> 40) * (1.0f / 16777216.0f);  // [0, 1)
      p[i] = f32_to_bf16((2.0f * u - 1.0f) * half_width);
    }
  }
  return t;
}

}  // namespace

ErnieDit ErnieDit::random(const DitConfig& cfg, Device device, DType act, uint64_t seed, bool stream_blocks) {
  std::map<std::string, Shape> shapes;
  for (const TensorSpec& s : dit_tensor_specs(cfg)) shapes[s.name] = s.shape;
  return build(cfg, device, act, [&](const std::string& name) {
    auto it = shapes.find(name);
    ERNIE_CHECK(it != shapes.end(), "ErnieDit::random: no spec for tensor ", name);
    return random_bf16(name, it->second, seed);
  }, stream_blocks);
}

}  // namespace ernie
