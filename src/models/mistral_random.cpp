// MistralModel with deterministic random weights: the prompt enhancer's speed test (bench-pe) at full
// size without a checkpoint.
#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "models/mistral.h"

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

// Norm weights are 1; the others uniform with std 0.02. Each 64 Ki chunk has its own xorshift stream, so
// the values do not depend on the number of threads.
Tensor random_weight(const std::string& name, const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::BF16);
  uint16_t* p = t.data<uint16_t>();
  const int64_t n = t.numel();
  if (name.ends_with("norm.weight")) {
    std::fill(p, p + n, f32_to_bf16(1.0f));
    return t;
  }
  constexpr int64_t kChunk = 1 << 16;
  const float half_width = 0.02f * std::sqrt(3.0f);
  const uint64_t base = splitmix64(seed ^ name_hash(name));
#pragma omp parallel for schedule(static) if (n >= (int64_t(1) << 20))
  for (int64_t c = 0; c < (n + kChunk - 1) / kChunk; ++c) {
    uint64_t s = splitmix64(base + uint64_t(c)) | 1;
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      const float u = float(s >> 40) * (1.0f / 16777216.0f);
      p[i] = f32_to_bf16((2.0f * u - 1.0f) * half_width);
    }
  }
  return t;
}

}  // namespace

MistralModel MistralModel::random(const MistralConfig& cfg, Device device, DType act, uint64_t seed,
                                  bool with_lm_head) {
  ERNIE_CHECK(act == DType::F32 || act == DType::BF16, "random mistral: activation dtype ", dtype_name(act),
              " is not supported (F32 or BF16)");
  ERNIE_CHECK(!device.is_cpu() || act == DType::F32, "random mistral: the CPU backend computes in F32, not ",
              dtype_name(act));
  std::map<std::string, Shape> want;
  for (const TensorSpec& s : mistral_tensor_specs(cfg, with_lm_head)) want[s.name] = s.shape;
  auto get = [&](const std::string& name) {
    auto it = want.find(name);
    ERNIE_CHECK(it != want.end(), "random mistral: no spec for tensor ", name);
    return random_weight(name, it->second, seed).to(device);
  };
  MistralModel m;
  m.cfg_ = cfg;
  m.device_ = device;
  m.act_ = act;
  m.rope_ = mistral_rope_frequencies(cfg);
  m.embed_tokens = get("embed_tokens.weight");
  for (int i = 0; i < cfg.num_hidden_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    Layer l;
    l.input_layernorm = get(p + "input_layernorm.weight");
    l.q_proj = get(p + "self_attn.q_proj.weight");
    l.k_proj = get(p + "self_attn.k_proj.weight");
    l.v_proj = get(p + "self_attn.v_proj.weight");
    l.o_proj = get(p + "self_attn.o_proj.weight");
    l.post_attention_layernorm = get(p + "post_attention_layernorm.weight");
    l.gate_proj = get(p + "mlp.gate_proj.weight");
    l.up_proj = get(p + "mlp.up_proj.weight");
    l.down_proj = get(p + "mlp.down_proj.weight");
    m.layers_.push_back(std::move(l));
  }
  if (with_lm_head) {
    m.norm = get("norm.weight");
    m.lm_head = cfg.tie_word_embeddings ? m.embed_tokens : get("@lm_head.weight");
  }
  return m;
}

}  // namespace ernie
