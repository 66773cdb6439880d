// The complete list of tensors each component's config implies (io/model_folder.h TensorSpec): names without
// the component prefix, and shapes.
#include "io/model_folder.h"

#include <string>

namespace ernie {

namespace {
std::string I(int i) { return std::to_string(i); }
using S = Shape;

void linear(std::vector<TensorSpec>& v, const std::string& name, int64_t out, int64_t in, bool bias) {
  v.push_back({name + ".weight", {out, in}});
  if (bias) v.push_back({name + ".bias", {out}});
}
void conv(std::vector<TensorSpec>& v, const std::string& name, int64_t out, int64_t in, int64_t k) {
  v.push_back({name + ".weight", {out, in, k, k}});
  v.push_back({name + ".bias", {out}});
}
void norm(std::vector<TensorSpec>& v, const std::string& name, int64_t c) {
  v.push_back({name + ".weight", {c}});
  v.push_back({name + ".bias", {c}});
}
void resnet(std::vector<TensorSpec>& v, const std::string& p, int64_t in, int64_t out) {
  norm(v, p + ".norm1", in);
  conv(v, p + ".conv1", out, in, 3);
  norm(v, p + ".norm2", out);
  conv(v, p + ".conv2", out, out, 3);
  if (in != out) conv(v, p + ".conv_shortcut", out, in, 1);
}
void mid_block(std::vector<TensorSpec>& v, const std::string& p, int64_t c, bool attn) {
  resnet(v, p + ".resnets.0", c, c);
  if (attn) {
    norm(v, p + ".attentions.0.group_norm", c);
    for (const char* n : {"to_q", "to_k", "to_v", "to_out.0"}) linear(v, p + ".attentions.0." + n, c, c, true);
  }
  resnet(v, p + ".resnets.1", c, c);
}
}  // namespace

std::vector<TensorSpec> dit_tensor_specs(const DitConfig& c) {
  std::vector<TensorSpec> v;
  const int64_t H = c.hidden_size, F = c.ffn_hidden_size, D = c.head_dim();
  v.push_back({"x_embedder.proj.weight", S{H, c.in_channels, c.patch_size, c.patch_size}});
  v.push_back({"x_embedder.proj.bias", S{H}});
  if (c.text_in_dim != c.hidden_size) linear(v, "text_proj", H, c.text_in_dim, false);
  linear(v, "time_embedding.linear_1", H, H, true);
  linear(v, "time_embedding.linear_2", H, H, true);
  linear(v, "adaLN_modulation.1", 6 * H, H, true);
  for (int l = 0; l < c.num_layers; ++l) {
    std::string p = "layers." + I(l) + ".";
    v.push_back({p + "adaLN_sa_ln.weight", S{H}});
    v.push_back({p + "adaLN_mlp_ln.weight", S{H}});
    for (const char* n : {"to_q", "to_k", "to_v", "to_out.0"}) linear(v, p + "self_attention." + n, H, H, false);
    if (c.qk_layernorm) {
      v.push_back({p + "self_attention.norm_q.weight", S{D}});
      v.push_back({p + "self_attention.norm_k.weight", S{D}});
    }
    linear(v, p + "mlp.gate_proj", F, H, false);
    linear(v, p + "mlp.up_proj", F, H, false);
    linear(v, p + "mlp.linear_fc2", H, F, false);
  }
  linear(v, "final_norm.linear", 2 * H, H, true);
  linear(v, "final_linear", int64_t(c.out_channels) * c.patch_size * c.patch_size, H, true);
  return v;
}

std::vector<TensorSpec> mistral_tensor_specs(const MistralConfig& c, bool with_lm_head) {
  std::vector<TensorSpec> v;
  const int64_t H = c.hidden_size, Q = int64_t(c.num_attention_heads) * c.head_dim,
                KV = int64_t(c.num_key_value_heads) * c.head_dim, F = c.intermediate_size;
  v.push_back({"embed_tokens.weight", S{c.vocab_size, H}});
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    std::string p = "layers." + I(l) + ".";
    v.push_back({p + "input_layernorm.weight", S{H}});
    linear(v, p + "self_attn.q_proj", Q, H, false);
    linear(v, p + "self_attn.k_proj", KV, H, false);
    linear(v, p + "self_attn.v_proj", KV, H, false);
    linear(v, p + "self_attn.o_proj", H, Q, false);
    v.push_back({p + "post_attention_layernorm.weight", S{H}});
    linear(v, p + "mlp.gate_proj", F, H, false);
    linear(v, p + "mlp.up_proj", F, H, false);
    linear(v, p + "mlp.down_proj", H, F, false);
  }
  // The final norm feeds only last_hidden_state/logits; the text encoder does not need it.
  v.push_back({"norm.weight", S{H}, with_lm_head});
  if (with_lm_head && !c.tie_word_embeddings) v.push_back({"@lm_head.weight", S{c.vocab_size, H}});
  return v;
}

std::vector<TensorSpec> vae_tensor_specs(const VaeConfig& c) {
  std::vector<TensorSpec> v;
  const auto& enc = c.block_out_channels;
  const int nb = int(enc.size()), L = c.latent_channels, lp = c.layers_per_block;
  conv(v, "encoder.conv_in", enc[0], c.in_channels, 3);
  int64_t ch = enc[0];
  for (int b = 0; b < nb; ++b) {
    for (int r = 0; r < lp; ++r) {
      resnet(v, "encoder.down_blocks." + I(b) + ".resnets." + I(r), ch, enc[b]);
      ch = enc[b];
    }
    if (b + 1 < nb) conv(v, "encoder.down_blocks." + I(b) + ".downsamplers.0.conv", ch, ch, 3);
  }
  mid_block(v, "encoder.mid_block", ch, c.mid_block_add_attention);
  norm(v, "encoder.conv_norm_out", ch);
  conv(v, "encoder.conv_out", 2 * L, ch, 3);
  if (c.use_quant_conv) conv(v, "quant_conv", 2 * L, 2 * L, 1);
  if (c.use_post_quant_conv) conv(v, "post_quant_conv", L, L, 1);
  std::vector<int> dec(c.decoder_channels().rbegin(), c.decoder_channels().rend());
  ch = dec[0];
  conv(v, "decoder.conv_in", ch, L, 3);
  mid_block(v, "decoder.mid_block", ch, c.mid_block_add_attention);
  for (int b = 0; b < nb; ++b) {
    for (int r = 0; r < lp + 1; ++r) {
      resnet(v, "decoder.up_blocks." + I(b) + ".resnets." + I(r), ch, dec[b]);
      ch = dec[b];
    }
    if (b + 1 < nb) conv(v, "decoder.up_blocks." + I(b) + ".upsamplers.0.conv", ch, ch, 3);
  }
  norm(v, "decoder.conv_norm_out", ch);
  conv(v, "decoder.conv_out", c.out_channels, ch, 3);
  const int64_t bn = int64_t(L) * c.patch_size[0] * c.patch_size[1];
  v.push_back({"bn.running_mean", S{bn}});
  v.push_back({"bn.running_var", S{bn}});
  v.push_back({"bn.num_batches_tracked", S{}, false});
  return v;
}

}  // namespace ernie
