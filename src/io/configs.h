// Typed, validated component configs parsed from the diffusers/transformers config.json files.
#pragma once
#include <array>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ernie {

// transformer/config.json (ErnieImageTransformer2DModel)
struct DitConfig {
  int hidden_size = 4096, num_attention_heads = 32, num_layers = 36, ffn_hidden_size = 12288;
  int in_channels = 128, out_channels = 128, patch_size = 1, text_in_dim = 3072;
  std::vector<int> rope_axes_dim = {32, 48, 48};
  float rope_theta = 256.f, eps = 1e-6f;
  bool qk_layernorm = true;
  int head_dim() const { return hidden_size / num_attention_heads; }
};

// text_encoder/config.json (Mistral3Model -> text_config) and pe/config.json (Ministral3ForCausalLM)
struct MistralConfig {
  int hidden_size = 3072, num_hidden_layers = 26, intermediate_size = 9216;
  int num_attention_heads = 32, num_key_value_heads = 8, head_dim = 128, vocab_size = 131072;
  float rms_norm_eps = 1e-5f;
  bool tie_word_embeddings = false;
  int bos_token_id = 1, eos_token_id = 2, pad_token_id = -1;
  // RoPE: rope_type "default" or "yarn"
  std::string rope_type = "yarn";
  double rope_theta = 1e6, factor = 16, original_max_position_embeddings = 16384, beta_fast = 32, beta_slow = 1;
  // YaRN attention factor inputs; 0 = absent (as None in transformers). attention_factor 0 = derive it.
  double mscale = 1, mscale_all_dim = 1, attention_factor = 0;
  bool rope_truncate = true;         // YaRN: floor/ceil the correction range
  double llama_4_scaling_beta = 0;  // llama-4 q scale: ministral3 only
  int max_position_embeddings = 262144;
};

// vae/config.json (AutoencoderKLFlux2)
struct VaeConfig {
  int in_channels = 3, out_channels = 3, latent_channels = 32, layers_per_block = 2, norm_num_groups = 32;
  std::vector<int> block_out_channels = {128, 256, 512, 512};
  std::vector<int> decoder_block_out_channels;  // empty: same as block_out_channels
  std::array<int, 2> patch_size = {2, 2};
  bool mid_block_add_attention = true, use_quant_conv = true, use_post_quant_conv = true;
  float batch_norm_eps = 1e-4f;
  // Pixels per latent (before patchify): 2^(blocks-1).
  int spatial_scale() const { return 1 << (int(block_out_channels.size()) - 1); }
  // Pixels per DiT token: spatial_scale * patch.
  int scale_factor() const { return spatial_scale() * patch_size[0]; }
  const std::vector<int>& decoder_channels() const {
    return decoder_block_out_channels.empty() ? block_out_channels : decoder_block_out_channels;
  }
};

// scheduler/scheduler_config.json (FlowMatchEulerDiscreteScheduler)
struct SchedulerConfig {
  int num_train_timesteps = 1000;
  float shift = 1.0f, base_shift = 0.5f, max_shift = 1.15f;
  int base_image_seq_len = 256, max_image_seq_len = 4096;
  bool use_dynamic_shifting = false, invert_sigmas = false;
  std::string time_shift_type = "exponential";  // or "linear"
  float shift_terminal = 0;                      // 0 = none
  bool use_karras_sigmas = false, use_exponential_sigmas = false, use_beta_sigmas = false, stochastic_sampling = false;
};

// Each parser validates and throws Error naming `path` and the field.
DitConfig parse_dit_config(const nlohmann::json& j, const std::string& path);
MistralConfig parse_mistral_config(const nlohmann::json& j, const std::string& path);  // accepts text_config nesting
VaeConfig parse_vae_config(const nlohmann::json& j, const std::string& path);
SchedulerConfig parse_scheduler_config(const nlohmann::json& j, const std::string& path);

}  // namespace ernie
