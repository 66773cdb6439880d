// The Mistral / Ministral3 language model: the text encoder (ERNIE-Image takes hidden_states[-2], the
// raw residual stream after the second-to-last layer) and the prompt enhancer (all layers, final norm,
// tied LM head, KV cache). Reads like transformers' MistralModel.
#pragma once
#include <vector>

#include "io/configs.h"
#include "io/model_folder.h"

namespace ernie {

struct KVCache {
  std::vector<Tensor> k, v;  // per layer [1, capacity, kv_heads, head_dim]
  int64_t length = 0;        // tokens already cached
};

class MistralModel {
 public:
  // Loads layers [0, n_layers) (all when n_layers < 0) onto `device` with activations in `act`.
  static MistralModel load(const Component& comp, const MistralConfig& cfg, Device device, DType act,
                           int n_layers = -1, bool with_lm_head = false);
  const MistralConfig& config() const { return cfg_; }
  // Runs the first `n_layers` layers over ids (positions start at cache->length when a cache is given)
  // and returns the residual stream [T, hidden] after them (no final norm).
  Tensor forward(const std::vector<int64_t>& ids, int n_layers, KVCache* cache = nullptr) const;
  // Final norm + LM head over hidden [T, hidden] -> logits [T, vocab] (F32).
  Tensor logits(const Tensor& hidden) const;
  KVCache new_cache(int64_t capacity) const;
  int num_layers() const { return int(layers_.size()); }

  struct Layer {
    Tensor input_layernorm, q_proj, k_proj, v_proj, o_proj, post_attention_layernorm, gate_proj, up_proj, down_proj;
  };

 private:
  MistralConfig cfg_;
  Device device_;
  DType act_ = DType::F32;
  Tensor embed_tokens, norm, lm_head;
  std::vector<Layer> layers_;
  std::vector<float> inv_freq_;  // RoPE frequencies (YaRN or default), head_dim/2
};

// The ERNIE-Image text encoder: hidden_states[-2] of the language model.
class TextEncoder {
 public:
  static TextEncoder load(const ModelFolder& m, Device device, DType act);
  Tensor encode(const std::vector<int64_t>& ids) const;  // [T, hidden]
  const MistralConfig& config() const { return lm_.config(); }

 private:
  MistralModel lm_;
};

}  // namespace ernie
