// The Mistral / Ministral3 language model: the text encoder (ERNIE-Image takes hidden_states[-2], the
// raw residual stream after the second-to-last layer) and the prompt enhancer (all layers, final norm,
// tied LM head, KV cache). Reads like transformers' MistralModel.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "io/configs.h"
#include "io/model_folder.h"
#include "ops/ops.h"

namespace ernie {

struct KVCache {
  std::vector<Tensor> k, v;  // per layer [1, capacity, kv_heads, head_dim]
  int64_t length = 0;        // tokens already cached
  // RoPE tables [1, capacity, head_dim] of every position (F32, the cache's device), filled once by new_cache so
  // a decoding step uploads none; cos_q / sin_q with the llama-4 query scale (undefined when it is 1 throughout).
  Tensor cos, sin, cos_q, sin_q;
  int64_t capacity() const { return k.empty() ? 0 : k[0].dim(1); }
};

// RoPE frequencies as transformers computes them (rope_type "default" or "yarn", _compute_yarn_parameters):
// inv_freq [head_dim/2] and the factor cos/sin are multiplied by (YaRN's mscale ratio; 1 for default).
struct RopeFrequencies {
  std::vector<float> inv_freq;
  float attention_scaling = 1.f;
};
RopeFrequencies mistral_rope_frequencies(const MistralConfig& cfg);

// Ministral3's llama-4 query scale at position `pos`: 1 + beta·ln(1 + floor(pos / original_max)); 1 when
// llama_4_scaling_beta is 0 (model_type mistral) and for every pos < original_max_position_embeddings.
float llama4_query_scale(const MistralConfig& cfg, int64_t pos);

class MistralModel {
 public:
  // Loads layers [0, n_layers) (all when n_layers < 0) onto `device` with activations in `act`. Every
  // tensor is checked against the shape the config implies; a mismatch throws naming the tensor.
  // On the CPU the weights stay mmap views in their stored dtype (the GEMM converts them on the fly).
  // The 8-bit projections of a converted file are expanded to the activation dtype at load, or with
  // `keep_8bit` kept 8-bit and expanded one projection at a time as the forward runs (weight-only: the
  // activations stay in their dtype), for half the device memory at the cost of one pass over the weights.
  // `quantize` (I8 or F8_E4M3, with keep_8bit) quantizes the float projections at load the same way, per
  // output channel as convert does (the embedding and norms stay float).
  static MistralModel load(const Component& comp, const MistralConfig& cfg, Device device, DType act,
                           int n_layers = -1, bool with_lm_head = false, bool keep_8bit = false,
                           std::optional<DType> quantize = std::nullopt);
  const MistralConfig& config() const { return cfg_; }
  // Runs the first `n_layers` layers over ids (positions start at cache->length when a cache is given,
  // and the new keys/values are appended to it) and returns the residual stream [T, hidden] after them
  // (no final norm).
  Tensor forward(const std::vector<int64_t>& ids, int n_layers, KVCache* cache = nullptr) const;
  // The same for ids already on the model's device (I64 [T], e.g. ops::argmax_indices of the last logits), so
  // nothing waits for the host between decoding steps; an id outside the vocabulary embeds as zeros.
  Tensor forward_from_device(const Tensor& ids, int n_layers, KVCache* cache = nullptr) const;
  // Final norm + LM head over hidden [T, hidden] -> logits [T, vocab] (F32). Needs with_lm_head.
  Tensor logits(const Tensor& hidden) const;
  // The same in the activation dtype, as the LM head writes them (what greedy's argmax needs: the F32 cast is
  // exact and keeps the order).
  Tensor head_logits(const Tensor& hidden) const;
  // An empty cache for up to `capacity` tokens over all loaded layers.
  KVCache new_cache(int64_t capacity) const;
  // All layers with deterministic random BF16 weights (norms 1, the rest uniform with std 0.02), for speed
  // tests at full size without a checkpoint (mistral_random.cpp). Generated on the host, then uploaded.
  // `n_layers` limits the layers built (-1: all).
  static MistralModel random(const MistralConfig& cfg, Device device, DType act, uint64_t seed,
                             bool with_lm_head = true, std::optional<DType> quantize = std::nullopt, int n_layers = -1);
  int num_layers() const { return int(layers_.size()); }
  size_t weight_bytes() const;  // every weight as placed (8-bit projections with their scales)
  Device device() const { return device_; }
  DType act_dtype() const { return act_; }

  struct Layer {
    Tensor input_layernorm, post_attention_layernorm;
    ops::Weight q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj;  // float or 8-bit
    // On CUDA: q|k|v and gate|up stacked by rows (one GEMV / GEMM each); the parts are then left undefined.
    ops::Weight qkv_proj, gate_up_proj;
  };

 private:
  // A sublayer's input: norm(hidden + delta), delta (the previous sublayer's output) undefined before layer 0.
  // The residual add and the RMSNorm run inside the sublayer's first projection where its weights are stacked
  // (ops::add_rms_norm_linear); `sum` receives hidden + delta either way.
  struct Input {
    const Tensor& hidden;
    const Tensor& delta;
    const Tensor& norm;
  };
  Tensor normed(const Input& in, Tensor& sum) const;  // the unstacked path: the normed input itself
  Tensor dense(const ops::Weight& w) const;            // a projection's weight in float (8-bit ones expanded)
  // Each returns the sublayer's output (the next residual delta).
  Tensor self_attn(const Layer& l, const Input& in, Tensor& sum, const Tensor& cos_q, const Tensor& sin_q,
                   const Tensor& cos_k, const Tensor& sin_k, int64_t pos0, Tensor* k_cache, Tensor* v_cache) const;
  Tensor mlp(const Layer& l, const Input& in, Tensor& sum) const;
  Tensor run_layers(Tensor hidden_states, int n_layers, KVCache* cache) const;  // forward after the embedding
  // Layers [0, n_layers) (and the final norm and LM head) from `source`: tensor name (as in
  // mistral_tensor_specs) and the shape the config implies -> host weight (float, or 8-bit with its scales
  // for a projection), placed on `device` here.
  // `who` names the model in errors.
  using TensorSource = std::function<ops::Weight(const std::string& name, const Shape& shape)>;
  static MistralModel build(const MistralConfig& cfg, Device device, DType act, int n_layers, bool with_lm_head,
                            const std::string& who, const TensorSource& source, std::optional<DType> quantize);

  MistralConfig cfg_;
  Device device_;
  DType act_ = DType::F32;
  Tensor embed_tokens, norm, lm_head;
  std::vector<Layer> layers_;
  RopeFrequencies rope_;
};

// The ERNIE-Image text encoder: hidden_states[-2] of the language model, i.e. the raw residual stream
// after layer num_hidden_layers-2 (only layers 0..L-2 are loaded and run; no final norm).
class TextEncoder {
 public:
  // An 8-bit file's projections stay 8-bit (MistralModel::load's keep_8bit); `quantize` (I8 or F8_E4M3:
  // QuantPolicy::text_encoder_quantization under --quantize) quantizes a float model's the same way.
  static TextEncoder load(const ModelFolder& m, Device device, DType act, std::optional<DType> quantize = std::nullopt);
  // The layers load() keeps, with MistralModel::random's weights (bench --random).
  static TextEncoder random(const MistralConfig& cfg, Device device, DType act, uint64_t seed,
                            std::optional<DType> quantize = std::nullopt);
  Tensor encode(const std::vector<int64_t>& ids) const;  // [T, hidden] in the activation dtype
  const MistralConfig& config() const { return lm_.config(); }
  size_t weight_bytes() const { return lm_.weight_bytes(); }

 private:
  MistralModel lm_;
};

}  // namespace ernie
