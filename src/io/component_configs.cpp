#include "io/component_configs.h"

#include <nlohmann/json.hpp>
#include <numeric>

#include "core/error.h"

using json = nlohmann::json;

namespace ernie {

namespace {
std::string I(int64_t i) { return std::to_string(i); }

const TensorInfo& need(const TensorLookup& find, const std::string& name, size_t rank, const std::string& path) {
  const TensorInfo* t = find(name);
  ERNIE_CHECK(t, path, ": missing tensor '", name, "' (needed to read the config off the shapes)");
  ERNIE_CHECK(t->shape.size() == rank, path, ": tensor '", name, "' has shape ", shape_str(t->shape), ", expected ",
              I(int64_t(rank)), " dimensions");
  for (int64_t d : t->shape) ERNIE_CHECK(d > 0 && d <= (int64_t(1) << 30), path, ": tensor '", name, "' has shape ",
                                          shape_str(t->shape));
  return *t;
}

// How many of name(0), name(1), ... exist (at most `limit`).
template <class F>
int count(const TensorLookup& find, F name, int limit = 4096) {
  int n = 0;
  while (n < limit && find(name(n))) ++n;
  return n;
}

std::string where(const std::string& path) { return path + " (config read off its tensor shapes)"; }
}  // namespace

DitConfig infer_dit_config(const TensorLookup& find, const std::string& path) {
  const TensorInfo x = need(find, "x_embedder.proj.weight", 4, path);
  const int64_t H = x.shape[0];
  const int layers = count(find, [](int l) { return "layers." + I(l) + ".adaLN_sa_ln.weight"; });
  ERNIE_CHECK(layers > 0, path, ": no 'layers.0.adaLN_sa_ln.weight': not a DiT with blocks");
  const TensorInfo* nq = find("layers.0.self_attention.norm_q.weight");
  const int64_t head_dim = nq && nq->shape.size() == 1 ? nq->shape[0] : 128;
  ERNIE_CHECK(head_dim > 0 && H % head_dim == 0, path, ": hidden size ", I(H), " is not a multiple of the head dim ",
              I(head_dim));
  ERNIE_CHECK(head_dim % 16 == 0, path, ": head dim ", I(head_dim),
              " is not a multiple of 16, so the released RoPE axes (32, 48, 48) do not scale to it");
  const int64_t ffn = need(find, "layers.0.mlp.gate_proj.weight", 2, path).shape[0];
  const TensorInfo* tp = find("text_proj.weight");
  const int64_t text_in = tp && tp->shape.size() == 2 ? tp->shape[1] : H;
  const int64_t p = x.shape[2];
  const int64_t out = need(find, "final_linear.weight", 2, path).shape[0] / (p * p);
  const json j = {{"hidden_size", H},
                  {"num_attention_heads", H / head_dim},
                  {"num_layers", layers},
                  {"ffn_hidden_size", ffn},
                  {"in_channels", x.shape[1]},
                  {"out_channels", out},
                  {"patch_size", p},
                  {"text_in_dim", text_in},
                  {"rope_axes_dim", {head_dim / 4, head_dim * 3 / 8, head_dim * 3 / 8}},
                  {"rope_theta", 256},
                  {"eps", 1e-6},
                  {"qk_layernorm", nq != nullptr}};
  return parse_dit_config(j, where(path));
}

MistralConfig infer_mistral_config(const TensorLookup& find, const std::string& path) {
  const TensorInfo e = need(find, "embed_tokens.weight", 2, path);
  const int layers = count(find, [](int l) { return "layers." + I(l) + ".input_layernorm.weight"; });
  ERNIE_CHECK(layers > 0, path, ": no 'layers.0.input_layernorm.weight': a text encoder without layers");
  const int64_t q = need(find, "layers.0.self_attn.q_proj.weight", 2, path).shape[0];
  const int64_t kv = need(find, "layers.0.self_attn.k_proj.weight", 2, path).shape[0];
  int64_t head_dim = 0;
  if (q % 128 == 0 && kv % 128 == 0) head_dim = 128;
  else
    for (int64_t d = std::min<int64_t>(128, std::gcd(q, kv)); d >= 2 && head_dim == 0; --d)
      if (q % d == 0 && kv % d == 0 && d % 2 == 0 && q / d >= 4) head_dim = d;
  ERNIE_CHECK(head_dim > 0, path, ": cannot tell the head dim from q_proj (", I(q), " rows) and k_proj (", I(kv),
              " rows); give the model folder with --model");
  const json rope = {{"rope_type", "yarn"},   {"rope_theta", 1e6}, {"factor", 16.0},
                     {"original_max_position_embeddings", 16384}, {"beta_fast", 32.0},  {"beta_slow", 1.0},
                     {"mscale", 1.0},         {"mscale_all_dim", 1.0}};
  const json tc = {{"model_type", "mistral"},
                   {"hidden_size", e.shape[1]},
                   {"vocab_size", e.shape[0]},
                   {"num_hidden_layers", layers},
                   {"intermediate_size", need(find, "layers.0.mlp.gate_proj.weight", 2, path).shape[0]},
                   {"num_attention_heads", q / head_dim},
                   {"num_key_value_heads", kv / head_dim},
                   {"head_dim", head_dim},
                   {"rms_norm_eps", 1e-5},
                   {"bos_token_id", 1},
                   {"eos_token_id", 2},
                   {"pad_token_id", nullptr},
                   {"max_position_embeddings", 262144},
                   {"tie_word_embeddings", false},
                   {"rope_parameters", rope}};
  return parse_mistral_config(json{{"text_config", tc}}, where(path));
}

VaeConfig infer_vae_config(const TensorLookup& find, const std::string& path) {
  auto down = [](int b, int r) { return "encoder.down_blocks." + I(b) + ".resnets." + I(r) + ".conv1.weight"; };
  const int nb = count(find, [&](int b) { return down(b, 0); }, 8);
  ERNIE_CHECK(nb > 0, path, ": no '", down(0, 0), "': a VAE without encoder blocks");
  const int lp = count(find, [&](int r) { return down(0, r); }, 64);
  std::vector<int> enc, dec;
  for (int b = 0; b < nb; ++b) enc.push_back(int(need(find, down(b, 0), 4, path).shape[0]));
  for (int b = 0; b < nb; ++b)
    dec.push_back(int(need(find, "decoder.up_blocks." + I(b) + ".resnets.0.conv1.weight", 4, path).shape[0]));
  std::vector<int> dec_out(dec.rbegin(), dec.rend());
  const TensorInfo cin = need(find, "encoder.conv_in.weight", 4, path);
  const int64_t latent = need(find, "encoder.conv_out.weight", 4, path).shape[0] / 2;
  const TensorInfo* bn = find("bn.running_mean");
  ERNIE_CHECK(bn && bn->shape.size() == 1, path, ": missing tensor 'bn.running_mean' (the latent BatchNorm)");
  int64_t p = 1;
  while (p * p * latent < bn->shape[0]) ++p;
  ERNIE_CHECK(p * p * latent == bn->shape[0], path, ": bn.running_mean ", shape_str(bn->shape), " is not ",
              I(latent), " latent channels times a square patch");
  int groups = enc[0] >= 128 ? 32 : std::max(1, enc[0] / 4);
  for (int c : enc) groups = std::gcd(groups, c);
  for (int c : dec) groups = std::gcd(groups, c);
  const json j = {{"in_channels", cin.shape[1]},
                  {"out_channels", need(find, "decoder.conv_out.weight", 4, path).shape[0]},
                  {"latent_channels", latent},
                  {"layers_per_block", lp},
                  {"norm_num_groups", groups},
                  {"block_out_channels", enc},
                  {"decoder_block_out_channels", dec_out == enc ? json(nullptr) : json(dec_out)},
                  {"patch_size", {p, p}},
                  {"mid_block_add_attention", find("encoder.mid_block.attentions.0.to_q.weight") != nullptr},
                  {"use_quant_conv", find("quant_conv.weight") != nullptr},
                  {"use_post_quant_conv", find("post_quant_conv.weight") != nullptr},
                  {"batch_norm_eps", 1e-4}};
  return parse_vae_config(j, where(path));
}

SchedulerConfig released_scheduler_config() {
  SchedulerConfig s;  // the field defaults are FlowMatchEulerDiscreteScheduler's, the released file's values
  s.shift = 4.0f;
  return s;
}

}  // namespace ernie
