#include "models/random_folder.h"

#include <omp.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/file.h"
#include "io/model_folder.h"
#include "io/safetensors.h"
#include "models/random_weights.h"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace ernie {

namespace {
json rope_json(const MistralConfig& c, bool ministral3) {
  json r = {{"rope_type", c.rope_type}, {"rope_theta", c.rope_theta}};
  if (c.rope_type == "yarn") {
    r["factor"] = c.factor;
    r["original_max_position_embeddings"] = c.original_max_position_embeddings;
    r["beta_fast"] = c.beta_fast;
    r["beta_slow"] = c.beta_slow;
    r["mscale"] = c.mscale;
    r["mscale_all_dim"] = c.mscale_all_dim;
    if (c.attention_factor != 0) r["attention_factor"] = c.attention_factor;
    if (!c.rope_truncate) r["truncate"] = false;
    r["max_position_embeddings"] = c.max_position_embeddings;
  }
  if (ministral3) r["llama_4_scaling_beta"] = c.llama_4_scaling_beta;
  return r;
}

json lm_json(const MistralConfig& c, const char* model_type) {
  const bool ministral3 = std::string(model_type) == "ministral3";
  return {{"model_type", model_type},
          {"hidden_size", c.hidden_size},
          {"num_hidden_layers", c.num_hidden_layers},
          {"intermediate_size", c.intermediate_size},
          {"num_attention_heads", c.num_attention_heads},
          {"num_key_value_heads", c.num_key_value_heads},
          {"head_dim", c.head_dim},
          {"hidden_act", "silu"},
          {"vocab_size", c.vocab_size},
          {"rms_norm_eps", c.rms_norm_eps},
          {"bos_token_id", c.bos_token_id},
          {"eos_token_id", c.eos_token_id},
          {"pad_token_id", c.pad_token_id >= 0 ? json(c.pad_token_id) : json(nullptr)},
          {"max_position_embeddings", c.max_position_embeddings},
          {"tie_word_embeddings", c.tie_word_embeddings},
          {"rope_parameters", rope_json(c, ministral3)}};
}

void write_text(const fs::path& p, const std::string& text) { write_file_atomic(p.string(), text); }

// Copies every regular file of `from` into `to` (created).
void copy_folder(const fs::path& from, const fs::path& to) {
  ERNIE_CHECK(fs::is_directory(from), from.string(), ": missing (needed as the template of ", to.filename().string(), "/)");
  fs::create_directories(to);
  for (const auto& e : fs::directory_iterator(from))
    if (e.is_regular_file())
      write_text(to / e.path().filename(), read_regular_file(e.path().string(), size_t(64) << 20));
}

using Rule = Tensor (*)(const std::string&, const Shape&, uint64_t);

// One component's tensors (`specs`, named `prefix` + name; '@' names at the root) in shards of at most
// `shard_bytes`, named like the release: <stem>.safetensors, or <stem>-0000i-of-0000n.safetensors plus
// <stem>.safetensors.index.json.
void write_component(const fs::path& dir, const std::string& stem, const std::vector<TensorSpec>& specs,
                     const std::string& prefix, Rule rule, const RandomFolderOptions& opt, RandomFolderStats& st,
                     const std::function<void(size_t)>& advanced) {
  fs::create_directories(dir);
  std::vector<std::vector<PendingTensor>> shards(1);
  size_t shard_size = 0, total = 0;
  for (const TensorSpec& s : specs) {
    const std::string name = s.name[0] == '@' ? s.name.substr(1) : prefix + s.name;
    const DType dt = s.name == "bn.num_batches_tracked" ? DType::I64 : DType::BF16;
    const size_t bytes = size_t(shape_numel(s.shape)) * dtype_size(dt);
    if (!shards.back().empty() && shard_size + bytes > opt.shard_bytes) shards.emplace_back(), shard_size = 0;
    // Values by the name the model asks for (without the prefix), as the models' random() make them.
    shards.back().push_back({name, dt, s.shape, [rule, n = s.name, shape = s.shape, seed = opt.seed] {
                               return rule(n[0] == '@' ? n.substr(1) : n, shape, seed);
                             }});
    shard_size += bytes;
    total += bytes;
  }
  const int threads = opt.threads > 0 ? opt.threads : omp_get_max_threads();
  const size_t n = shards.size();
  json weight_map = json::object();
  for (size_t i = 0; i < n; ++i) {
    char file[256];
    if (n == 1) std::snprintf(file, sizeof file, "%s.safetensors", stem.c_str());
    else std::snprintf(file, sizeof file, "%s-%05zu-of-%05zu.safetensors", stem.c_str(), i + 1, n);
    size_t last = 0;
    save_safetensors_streamed((dir / file).string(), shards[i], {{"format", "pt"}}, 8,
                              [&](size_t done, size_t) { advanced(done - last), last = done; }, threads);
    for (const PendingTensor& t : shards[i]) weight_map[t.name] = file;
    st.tensors += shards[i].size();
    ++st.files;
  }
  st.bytes += total;
  if (n > 1)
    write_text(dir / (stem + ".safetensors.index.json"),
               json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2));
}
}  // namespace

MistralConfig full_size_pe_config() {
  MistralConfig c;
  c.tie_word_embeddings = true;  // logits = norm(h) · embed_tokensᵀ
  c.llama_4_scaling_beta = 0.1;  // ministral3
  c.pad_token_id = 11;
  return c;
}

std::string dit_config_json(const DitConfig& c) {
  return json{{"_class_name", "ErnieImageTransformer2DModel"},
              {"hidden_size", c.hidden_size},
              {"num_attention_heads", c.num_attention_heads},
              {"num_layers", c.num_layers},
              {"ffn_hidden_size", c.ffn_hidden_size},
              {"in_channels", c.in_channels},
              {"out_channels", c.out_channels},
              {"patch_size", c.patch_size},
              {"text_in_dim", c.text_in_dim},
              {"rope_axes_dim", c.rope_axes_dim},
              {"rope_theta", c.rope_theta},
              {"eps", c.eps},
              {"qk_layernorm", c.qk_layernorm}}
      .dump(2);
}

std::string text_encoder_config_json(const MistralConfig& c) {
  return json{{"architectures", {"Mistral3Model"}},
              {"model_type", "mistral3"},
              {"dtype", "bfloat16"},
              {"text_config", lm_json(c, "mistral")},
              {"tie_word_embeddings", true}}
      .dump(2);
}

std::string pe_config_json(const MistralConfig& c) {
  json j = lm_json(c, "ministral3");
  j["architectures"] = {"Ministral3ForCausalLM"};
  j["dtype"] = "bfloat16";
  return j.dump(2);
}

std::string vae_config_json(const VaeConfig& c) {
  return json{{"_class_name", "AutoencoderKLFlux2"},
              {"in_channels", c.in_channels},
              {"out_channels", c.out_channels},
              {"latent_channels", c.latent_channels},
              {"layers_per_block", c.layers_per_block},
              {"norm_num_groups", c.norm_num_groups},
              {"block_out_channels", c.block_out_channels},
              {"decoder_block_out_channels",
               c.decoder_block_out_channels.empty() ? json(nullptr) : json(c.decoder_block_out_channels)},
              {"patch_size", {c.patch_size[0], c.patch_size[1]}},
              {"mid_block_add_attention", c.mid_block_add_attention},
              {"use_quant_conv", c.use_quant_conv},
              {"use_post_quant_conv", c.use_post_quant_conv},
              {"batch_norm_eps", c.batch_norm_eps},
              {"act_fn", "silu"}}
      .dump(2);
}

RandomFolderStats write_random_folder(const std::string& dir, const RandomFolderOptions& opt,
                                      const std::function<void(size_t, size_t)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const fs::path root(dir), tpl(opt.template_dir);
  ERNIE_CHECK(!fs::exists(root) || (fs::is_directory(root) && fs::is_empty(root)), dir,
              ": exists and is not an empty folder (a random model is written into a new folder)");
  ERNIE_CHECK(opt.shard_bytes > 0, "random model: shard size must be positive");
  fs::create_directories(root);

  json index = {{"_class_name", "ErnieImagePipeline"}, {"_name_or_path", "random-weights"},
                {"scheduler", {"diffusers", "FlowMatchEulerDiscreteScheduler"}},
                {"text_encoder", {"transformers", "Mistral3Model"}}, {"tokenizer", {"transformers", "TokenizersBackend"}},
                {"transformer", {"diffusers", "ErnieImageTransformer2DModel"}}, {"vae", {"diffusers", "AutoencoderKLFlux2"}}};
  copy_folder(tpl / "tokenizer", root / "tokenizer");
  copy_folder(tpl / "scheduler", root / "scheduler");
  fs::create_directories(root / "transformer");
  fs::create_directories(root / "text_encoder");
  fs::create_directories(root / "vae");
  write_text(root / "transformer" / "config.json", dit_config_json(opt.dit));
  write_text(root / "text_encoder" / "config.json", text_encoder_config_json(opt.text_encoder));
  write_text(root / "vae" / "config.json", vae_config_json(opt.vae));
  if (opt.pe) {
    index["pe"] = {"transformers", "Ministral3ForCausalLM"};
    index["pe_tokenizer"] = {"transformers", "TokenizersBackend"};
    copy_folder(tpl / "pe_tokenizer", root / "pe_tokenizer");
    fs::create_directories(root / "pe");
    write_text(root / "pe" / "config.json", pe_config_json(*opt.pe));
    if (fs::exists(tpl / "pe" / "generation_config.json"))
      fs::copy_file(tpl / "pe" / "generation_config.json", root / "pe" / "generation_config.json");
  }
  write_text(root / "model_index.json", index.dump(2));

  // The tensors, component by component: the total first, for the progress.
  const std::vector<TensorSpec> dit = dit_tensor_specs(opt.dit);
  const std::vector<TensorSpec> te = mistral_tensor_specs(opt.text_encoder, false);
  const std::vector<TensorSpec> vae = vae_tensor_specs(opt.vae);
  const std::vector<TensorSpec> pe = opt.pe ? mistral_tensor_specs(*opt.pe, true) : std::vector<TensorSpec>{};
  size_t total = 0, done = 0;
  for (const std::vector<TensorSpec>* specs : {&dit, &te, &vae, &pe})
    for (const TensorSpec& s : *specs) total += size_t(shape_numel(s.shape)) * (s.name == "bn.num_batches_tracked" ? 8 : 2);
  auto advanced = [&](size_t bytes) {
    done += bytes;
    if (progress) progress(done, total);
  };
  RandomFolderStats st;
  write_component(root / "transformer", "diffusion_pytorch_model", dit, "", random_weights::dit_tensor, opt, st, advanced);
  write_component(root / "text_encoder", "model", te, "language_model.model.", random_weights::mistral_tensor, opt, st,
                  advanced);
  write_component(root / "vae", "diffusion_pytorch_model", vae, "", random_weights::vae_tensor, opt, st, advanced);
  if (opt.pe) write_component(root / "pe", "model", pe, "model.", random_weights::mistral_tensor, opt, st, advanced);
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

}  // namespace ernie
