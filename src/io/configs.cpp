#include "io/configs.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/error.h"

using json = nlohmann::json;

namespace ernie {

namespace {

// Reads field `key` into `out` if present; a present field of the wrong type is an error.
template <class T>
void field(const json& j, const char* key, T& out, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return;
  const json& v = j[key];
  bool ok;
  if constexpr (std::is_same_v<T, bool>) ok = v.is_boolean();
  else if constexpr (std::is_integral_v<T>) ok = v.is_number_integer();
  else if constexpr (std::is_floating_point_v<T>) ok = v.is_number();
  else if constexpr (std::is_same_v<T, std::string>) ok = v.is_string();
  else ok = v.is_array();
  if constexpr (std::is_same_v<T, std::vector<int>>) {
    if (ok)
      for (const json& e : v) ok = ok && e.is_number_integer();
  }
  ERNIE_CHECK(ok, path, ": field '", key, "' has the wrong type (", v.type_name(), ": ", v.dump(160), ")");
  // Integers within [-1, 2^30], whole lists too (a value past int's range would otherwise be cut silently).
  auto in_range = [&](const json& e) {
    const bool neg = e.is_number_integer() && !e.is_number_unsigned() && e.get<int64_t>() < -1;
    const bool big = e.is_number_unsigned() ? e.get<uint64_t>() > (1ull << 30) : e.get<int64_t>() > (1ll << 30);
    ERNIE_CHECK(!neg && !big, path, ": field '", key, "' = ", e.dump(), " is out of range");
  };
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) in_range(v);
  if constexpr (std::is_same_v<T, std::vector<int>>) {
    ERNIE_CHECK(v.size() <= 64, path, ": field '", key, "' has ", std::to_string(v.size()), " entries (at most 64)");
    for (const json& e : v) in_range(e);
  }
  out = v.get<T>();
}

void positive(int v, const char* key, const std::string& path) {
  ERNIE_CHECK(v > 0, path, ": field '", key, "' must be positive, got ", std::to_string(v));
}

}  // namespace

DitConfig parse_dit_config(const json& j, const std::string& path) {
  DitConfig c;
  field(j, "hidden_size", c.hidden_size, path);
  field(j, "num_attention_heads", c.num_attention_heads, path);
  field(j, "num_layers", c.num_layers, path);
  field(j, "ffn_hidden_size", c.ffn_hidden_size, path);
  field(j, "in_channels", c.in_channels, path);
  field(j, "out_channels", c.out_channels, path);
  field(j, "patch_size", c.patch_size, path);
  field(j, "text_in_dim", c.text_in_dim, path);
  field(j, "rope_axes_dim", c.rope_axes_dim, path);
  field(j, "rope_theta", c.rope_theta, path);
  field(j, "eps", c.eps, path);
  field(j, "qk_layernorm", c.qk_layernorm, path);
  for (auto [v, k] : {std::pair{c.hidden_size, "hidden_size"}, {c.num_attention_heads, "num_attention_heads"},
                      {c.num_layers, "num_layers"}, {c.ffn_hidden_size, "ffn_hidden_size"},
                      {c.in_channels, "in_channels"}, {c.out_channels, "out_channels"},
                      {c.patch_size, "patch_size"}, {c.text_in_dim, "text_in_dim"}})
    positive(v, k, path);
  ERNIE_CHECK(c.hidden_size % c.num_attention_heads == 0, path, ": hidden_size ", std::to_string(c.hidden_size),
              " is not divisible by num_attention_heads ", std::to_string(c.num_attention_heads));
  ERNIE_CHECK(c.rope_axes_dim.size() == 3, path, ": rope_axes_dim must have 3 entries (text/row/column axes)");
  int sum = std::accumulate(c.rope_axes_dim.begin(), c.rope_axes_dim.end(), 0);
  ERNIE_CHECK(sum == c.head_dim(), path, ": rope_axes_dim sums to ", std::to_string(sum), " but the head dim is ",
              std::to_string(c.head_dim()));
  for (int a : c.rope_axes_dim) ERNIE_CHECK(a > 0 && a % 2 == 0, path, ": rope_axes_dim entries must be even and positive");
  ERNIE_CHECK(c.patch_size == 1, path, ": patch_size ", std::to_string(c.patch_size),
              " is not supported (the released model uses 1)");
  ERNIE_CHECK(c.rope_theta > 0 && c.rope_theta < 1e12, path, ": rope_theta must be in (0, 1e12)");
  ERNIE_CHECK(c.eps > 0 && c.eps < 1, path, ": eps must be in (0, 1), got ", std::to_string(c.eps));
  return c;
}

MistralConfig parse_mistral_config(const json& root, const std::string& path) {
  const json& j = root.contains("text_config") && root["text_config"].is_object() ? root["text_config"] : root;
  ERNIE_CHECK(!root.contains("text_config") || root["text_config"].is_object(), path, ": 'text_config' is not an object");
  MistralConfig c;
  field(j, "hidden_size", c.hidden_size, path);
  field(j, "num_hidden_layers", c.num_hidden_layers, path);
  field(j, "intermediate_size", c.intermediate_size, path);
  field(j, "num_attention_heads", c.num_attention_heads, path);
  field(j, "num_key_value_heads", c.num_key_value_heads, path);
  c.head_dim = c.hidden_size / std::max(1, c.num_attention_heads);
  field(j, "head_dim", c.head_dim, path);
  field(j, "vocab_size", c.vocab_size, path);
  field(j, "rms_norm_eps", c.rms_norm_eps, path);
  field(j, "bos_token_id", c.bos_token_id, path);
  field(j, "eos_token_id", c.eos_token_id, path);
  field(j, "pad_token_id", c.pad_token_id, path);
  field(j, "max_position_embeddings", c.max_position_embeddings, path);
  c.tie_word_embeddings = false;
  field(j, "tie_word_embeddings", c.tie_word_embeddings, path);
  std::string model_type;
  field(j, "model_type", model_type, path);
  const char* rope_key = j.contains("rope_parameters") ? "rope_parameters" : "rope_scaling";
  c.rope_type = "default";
  field(j, "rope_theta", c.rope_theta, path);
  if (j.contains(rope_key) && j[rope_key].is_object()) {
    const json& r = j[rope_key];
    // transformers treats absent mscale/mscale_all_dim/attention_factor as None (0 here); a yarn config
    // without original_max_position_embeddings falls back to max_position_embeddings, one without factor
    // to max_position_embeddings / original_max_position_embeddings.
    c.mscale = 0, c.mscale_all_dim = 0, c.attention_factor = 0;
    c.original_max_position_embeddings = c.max_position_embeddings;
    c.factor = 0;
    field(r, "rope_theta", c.rope_theta, path);
    if (r.contains("rope_type")) field(r, "rope_type", c.rope_type, path);
    else field(r, "type", c.rope_type, path);
    field(r, "factor", c.factor, path);
    field(r, "original_max_position_embeddings", c.original_max_position_embeddings, path);
    field(r, "beta_fast", c.beta_fast, path);
    field(r, "beta_slow", c.beta_slow, path);
    if (c.beta_fast == 0) c.beta_fast = 32;  // `or 32` / `or 1` in transformers
    if (c.beta_slow == 0) c.beta_slow = 1;
    field(r, "mscale", c.mscale, path);
    field(r, "mscale_all_dim", c.mscale_all_dim, path);
    field(r, "attention_factor", c.attention_factor, path);
    field(r, "truncate", c.rope_truncate, path);
    if (c.factor == 0) c.factor = c.max_position_embeddings / c.original_max_position_embeddings;
    if (model_type == "ministral3") field(r, "llama_4_scaling_beta", c.llama_4_scaling_beta, path);
  } else {
    ERNIE_CHECK(!j.contains(rope_key) || j[rope_key].is_null(), path, ": field '", rope_key, "' is not an object");
  }
  ERNIE_CHECK(c.rope_type == "default" || c.rope_type == "yarn", path, ": rope_type '", c.rope_type,
              "' is not supported (default, yarn)");
  for (auto [v, k] : {std::pair{c.hidden_size, "hidden_size"}, {c.num_hidden_layers, "num_hidden_layers"},
                      {c.intermediate_size, "intermediate_size"}, {c.num_attention_heads, "num_attention_heads"},
                      {c.num_key_value_heads, "num_key_value_heads"}, {c.head_dim, "head_dim"},
                      {c.vocab_size, "vocab_size"}})
    positive(v, k, path);
  ERNIE_CHECK(c.num_attention_heads % c.num_key_value_heads == 0, path, ": num_attention_heads ",
              std::to_string(c.num_attention_heads), " is not a multiple of num_key_value_heads ",
              std::to_string(c.num_key_value_heads));
  ERNIE_CHECK(c.head_dim % 2 == 0, path, ": head_dim must be even for RoPE");
  ERNIE_CHECK(c.rms_norm_eps > 0 && c.rms_norm_eps < 1, path, ": rms_norm_eps must be in (0, 1), got ",
              std::to_string(c.rms_norm_eps));
  ERNIE_CHECK(c.rope_theta > 0 && c.rope_theta < 1e12, path, ": rope_theta must be in (0, 1e12)");
  ERNIE_CHECK(c.rope_type != "yarn" || (c.factor > 0 && c.original_max_position_embeddings > 0 && c.beta_fast > 0 &&
                                        c.beta_slow > 0),
              path, ": yarn rope parameters (factor, original_max_position_embeddings, beta_fast, beta_slow) must be positive");
  return c;
}

VaeConfig parse_vae_config(const json& j, const std::string& path) {
  VaeConfig c;
  field(j, "in_channels", c.in_channels, path);
  field(j, "out_channels", c.out_channels, path);
  field(j, "latent_channels", c.latent_channels, path);
  field(j, "layers_per_block", c.layers_per_block, path);
  field(j, "norm_num_groups", c.norm_num_groups, path);
  field(j, "block_out_channels", c.block_out_channels, path);
  field(j, "decoder_block_out_channels", c.decoder_block_out_channels, path);
  field(j, "mid_block_add_attention", c.mid_block_add_attention, path);
  field(j, "use_quant_conv", c.use_quant_conv, path);
  field(j, "use_post_quant_conv", c.use_post_quant_conv, path);
  field(j, "batch_norm_eps", c.batch_norm_eps, path);
  std::vector<int> patch;
  field(j, "patch_size", patch, path);
  if (!patch.empty()) {
    ERNIE_CHECK(patch.size() == 2 && patch[0] > 0 && patch[0] == patch[1], path,
                ": patch_size must be [p, p] with p > 0");
    c.patch_size = {patch[0], patch[1]};
  }
  for (auto [v, k] : {std::pair{c.in_channels, "in_channels"}, {c.out_channels, "out_channels"},
                      {c.latent_channels, "latent_channels"}, {c.layers_per_block, "layers_per_block"},
                      {c.norm_num_groups, "norm_num_groups"}})
    positive(v, k, path);
  ERNIE_CHECK(!c.block_out_channels.empty() && c.block_out_channels.size() <= 8, path,
              ": block_out_channels must have 1 to 8 entries");
  ERNIE_CHECK(c.decoder_block_out_channels.empty() || c.decoder_block_out_channels.size() == c.block_out_channels.size(),
              path, ": decoder_block_out_channels must match block_out_channels in length");
  for (const auto* chans : {&c.block_out_channels, &c.decoder_block_out_channels})
    for (int ch : *chans)
      ERNIE_CHECK(ch > 0 && ch % c.norm_num_groups == 0, path, ": channel count ", std::to_string(ch),
                  " is not a positive multiple of norm_num_groups ", std::to_string(c.norm_num_groups));
  ERNIE_CHECK(c.batch_norm_eps > 0 && c.batch_norm_eps < 1, path, ": batch_norm_eps must be in (0, 1), got ",
              std::to_string(c.batch_norm_eps));
  return c;
}

SchedulerConfig parse_scheduler_config(const json& j, const std::string& path) {
  SchedulerConfig c;
  field(j, "num_train_timesteps", c.num_train_timesteps, path);
  field(j, "shift", c.shift, path);
  field(j, "base_shift", c.base_shift, path);
  field(j, "max_shift", c.max_shift, path);
  field(j, "base_image_seq_len", c.base_image_seq_len, path);
  field(j, "max_image_seq_len", c.max_image_seq_len, path);
  field(j, "use_dynamic_shifting", c.use_dynamic_shifting, path);
  field(j, "invert_sigmas", c.invert_sigmas, path);
  field(j, "time_shift_type", c.time_shift_type, path);
  field(j, "shift_terminal", c.shift_terminal, path);
  field(j, "use_karras_sigmas", c.use_karras_sigmas, path);
  field(j, "use_exponential_sigmas", c.use_exponential_sigmas, path);
  field(j, "use_beta_sigmas", c.use_beta_sigmas, path);
  field(j, "stochastic_sampling", c.stochastic_sampling, path);
  positive(c.num_train_timesteps, "num_train_timesteps", path);
  ERNIE_CHECK(c.shift > 0, path, ": field 'shift' must be positive");
  ERNIE_CHECK(c.time_shift_type == "exponential" || c.time_shift_type == "linear", path, ": time_shift_type '",
              c.time_shift_type, "' is not supported (exponential, linear)");
  ERNIE_CHECK(!c.use_karras_sigmas && !c.use_exponential_sigmas && !c.use_beta_sigmas && !c.invert_sigmas &&
                  !c.stochastic_sampling,
              path, ": karras/exponential/beta sigmas, invert_sigmas and stochastic_sampling are not supported yet");
  ERNIE_CHECK(!c.use_dynamic_shifting || c.max_image_seq_len != c.base_image_seq_len, path,
              ": base_image_seq_len equals max_image_seq_len; the dynamic shift is undefined");
  return c;
}

}  // namespace ernie
