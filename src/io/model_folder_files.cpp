// ModelFolder's components from files of their own (--diffusion-model, --text-encoder, --vae, --tokenizer): each
// told apart by the names it holds, its config the model's or read off its shapes (io/component_configs.h).
#include "io/model_folder.h"

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"
#include "io/component_configs.h"
#include "io/gguf.h"
#include "io/gguf_llm.h"
#include "io/gguf_tokenizer.h"
#include "io/key_layouts.h"
#include "io/layer_counts.h"

namespace fs = std::filesystem;

namespace ernie {

namespace {
std::string I(int i) { return std::to_string(i); }

bool is_gguf(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec) && read_file_head(path, 4) == "GGUF";
}

// The language-model prefixes a text encoder file may use: HF causal-LM names (Comfy-Org's text_encoders files),
// the diffusers text_encoder's Mistral3Model ones, bare.
const std::vector<std::string> kTextEncoderPrefixes = {"model.", "language_model.model.", "model.language_model.", ""};
const char* const kDitProbe = "x_embedder.proj.weight";

// What a tensor file given as the wrong component looks like, by the names it holds.
std::string looks_like(const Checkpoint& ck) {
  for (const char* p : {"", "model.diffusion_model."})
    if (ck.contains(std::string(p) + kDitProbe)) return "it looks like an ERNIE-Image DiT (give it as --diffusion-model)";
  for (const std::string& p : kTextEncoderPrefixes)
    if (ck.contains(p + "embed_tokens.weight") && ck.contains(p + "layers.0.self_attn.q_proj.weight"))
      return "it looks like a text encoder (give it as --text-encoder)";
  if (ck.contains("decoder.conv_in.weight") || ck.contains("encoder.conv_in.weight"))
    return "it looks like a VAE (give it as --vae)";
  const auto all = ck.tensors();
  return all.empty() ? std::string("it holds no tensors")
                     : "it holds none of the known layouts' names (its first tensor is '" + all.front()->name + "')";
}

template <class F>
int count_while(F name, int limit) {
  int n = 0;
  while (n < limit && name(n)) ++n;
  return n;
}
}  // namespace

ModelFolder ModelFolder::open_files(const ComponentFiles& given) {
  ComponentFiles files = given;  // a llama.cpp GGUF text encoder carries its tokenizer
  if (files.tokenizer.empty() && is_gguf(files.text_encoder) &&
      GgufFile::open(files.text_encoder)->meta("tokenizer.ggml.tokens"))
    files.tokenizer = files.text_encoder;
  ERNIE_CHECK(files.any(), "no model: give --model (a model folder or a converted file), or every component as a "
              "file of its own: --diffusion-model, --text-encoder, --vae and --tokenizer");
  std::string missing;
  for (const std::string& f : files.missing()) missing += (missing.empty() ? "" : ", ") + f;
  ERNIE_CHECK(missing.empty(), "no --model, so every component must come from a file of its own; missing: ", missing,
              " (or give --model for the components not given)");
  ModelFolder m;
  m.root = fs::absolute(files.diffusion_model).lexically_normal().string();
  m.from_files = true;
  m.turbo = false;  // ERNIE-Image's defaults (50 steps, cfg 4); Turbo runs take --steps 8 --cfg 1
  m.scheduler = released_scheduler_config();
  m.use_files(files, true);
  return m;
}

void ModelFolder::use_files(const ComponentFiles& files, bool infer) {
  if (!files.text_encoder.empty()) use_text_encoder(files.text_encoder, infer);
  if (!files.vae.empty()) use_vae(files.vae, infer);
  if (!files.diffusion_model.empty()) use_diffusion_model(files.diffusion_model, infer);
  if (!files.tokenizer.empty()) use_tokenizer(files.tokenizer);
}

// The DiT from a file of its own: its tensors bare ("layers.0...", diffusers' and Comfy-Org's diffusion_models
// files) or under "model.diffusion_model." (ComfyUI's checkpoint prefix); the config the model's, or (`infer`)
// read off the shapes.
void ModelFolder::use_diffusion_model(const std::string& path, bool infer) {
  Component c;
  c.name = "transformer";
  c.source = path;
  c.ckpt = Checkpoint::open_file(path);
  const std::string probe = kDitProbe;
  for (const char* p : {"", "model.diffusion_model."})
    if (c.ckpt.contains(p + probe)) c.prefix = p, c.root = p;
  ERNIE_CHECK(c.ckpt.contains(c.prefix + probe), path, ": not an ERNIE-Image diffusion model (no '", probe,
              "', bare or under 'model.diffusion_model.'); ", looks_like(c.ckpt));
  if (infer) dit = infer_dit_config([&](const std::string& n) { return c.ckpt.find(c.stored_name(n)); }, path);
  check_layer_count(c, dit.num_layers, "num_layers");
  c.specs = dit_tensor_specs(dit);
  transformer_c = std::move(c);
}

// The text encoder from a file of its own: the language model's names under one of kTextEncoderPrefixes (an
// lm_head, a tekken_model or a vision tower beside them are listed by check() and ignored).
void ModelFolder::use_text_encoder(const std::string& path, bool infer) {
  if (is_gguf(path)) {  // a llama.cpp LLM GGUF: its config from <arch>.*, its tensors under the HF names
    auto f = GgufFile::open(path);
    const MistralConfig cfg = gguf_mistral_config(*f);
    if (infer) text_encoder = cfg;
    Component c = gguf_llm_component(f, text_encoder, "text_encoder", false);
    c.source = path;
    c.layout = "llama.cpp";
    check_layer_count(c, text_encoder.num_hidden_layers, "num_hidden_layers");
    text_encoder_c = std::move(c);
    return;
  }
  Component c;
  c.name = "text_encoder";
  c.source = path;
  c.ckpt = Checkpoint::open_file(path);
  bool found = false;
  for (const std::string& p : kTextEncoderPrefixes)
    if (!found && c.ckpt.contains(p + "embed_tokens.weight")) c.prefix = p, found = true;
  ERNIE_CHECK(found, path, ": not a text encoder (no 'embed_tokens.weight' under 'model.', 'language_model.model.', "
              "'model.language_model.' or bare); ", looks_like(c.ckpt));
  if (infer)
    text_encoder = infer_mistral_config([&](const std::string& n) { return c.ckpt.find(c.stored_name(n)); }, path);
  check_layer_count(c, text_encoder.num_hidden_layers, "num_hidden_layers");
  c.specs = mistral_tensor_specs(text_encoder, false);
  text_encoder_c = std::move(c);
}

// The VAE from a file of its own, in the diffusers layout or the LDM/BFL one (key_layouts.h), told apart by the
// first encoder resnet's name.
void ModelFolder::use_vae(const std::string& path, bool infer) {
  Component c;
  c.name = "vae";
  c.source = path;
  c.ckpt = Checkpoint::open_file(path);
  const Checkpoint& ck = c.ckpt;
  const bool diffusers = ck.contains("encoder.down_blocks.0.resnets.0.conv1.weight");
  const bool ldm = ck.contains("encoder.down.0.block.0.conv1.weight");
  ERNIE_CHECK(diffusers || ldm, path, ": not a Flux2 VAE (no 'encoder.down_blocks.0.resnets.0.conv1.weight' of the "
              "diffusers layout or 'encoder.down.0.block.0.conv1.weight' of the LDM/BFL one); ", looks_like(ck));
  std::function<std::string(const std::string&)> stored = [](const std::string& n) { return n; };
  if (!diffusers) {
    c.layout = vae_layout_name(VaeLayout::Ldm);
    const int nb = count_while([&](int b) { return ck.contains("encoder.down." + I(b) + ".block.0.conv1.weight"); }, 8);
    const bool bfl_quant = ck.contains("encoder.quant_conv.weight") || ck.contains("decoder.post_quant_conv.weight");
    stored = [nb, bfl_quant](const std::string& n) { return ldm_vae_name(n, nb, bfl_quant); };
  }
  if (infer) vae = infer_vae_config([&](const std::string& n) { return ck.find(stored(n)); }, path);
  check_layer_count(c, int64_t(vae.block_out_channels.size()) * (vae.layers_per_block + 1), "layers_per_block");
  c.specs = vae_tensor_specs(vae);
  if (!diffusers)
    for (const TensorSpec& s : c.specs) {
      const std::string n = stored(s.name);
      if (n != s.name) c.renames[s.name] = n;
      if (vae_attention_weight(s.name)) c.conv_as_linear.insert(s.name);
    }
  vae_c = std::move(c);
}

// The tokenizer from its tokenizer.json (a folder holding one is taken too); a tokenizer_config.json beside it
// is read as the folder's would be.
void ModelFolder::use_tokenizer(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path).lexically_normal();
  if (fs::is_directory(p, ec) && fs::is_regular_file(p / "tokenizer.json", ec)) p /= "tokenizer.json";
  ERNIE_CHECK(fs::is_regular_file(p, ec), path, ": ", fs::exists(p, ec) ? "not a file" : "not found",
              " (--tokenizer takes a tokenizer.json file)");
  if (is_gguf(p.string())) {  // the tokenizer of a llama.cpp GGUF, rebuilt as tokenizer.json
    auto [tj, tc] = gguf_tokenizer_json(GgufFile::open(p.string())->metadata(), path);
    tokenizer_texts = {{"tokenizer/tokenizer.json", tj.dump()}, {"tokenizer/tokenizer_config.json", tc.dump()}};
    tokenizer_dir = p.string();
    return;
  }
  const std::string head = read_file_head(p.string(), 16);
  const size_t first = head.find_first_not_of(" \t\r\n\xef\xbb\xbf");
  ERNIE_CHECK(first != std::string::npos && head[first] == '{', path, ": not a tokenizer.json (a JSON object)",
              head.size() >= 9 && head[8] == '{' ? "; it is a safetensors tensor file" :
              head.rfind("GGUF", 0) == 0 ? "; it is a GGUF file" : "");
  tokenizer_file = p.string();
  tokenizer_dir = tokenizer_file;
}

}  // namespace ernie
