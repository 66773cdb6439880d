#include "io/model_folder.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"
#include "core/json.h"
#include "io/component_configs.h"
#include "io/gguf.h"
#include "io/gguf_llm.h"
#include "core/ggml_types.h"
#include "io/gguf_tokenizer.h"
#include "io/key_layouts.h"
#include "io/model_file.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

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

std::string lower(std::string s) {
  for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return s;
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

size_t Component::params() const {
  size_t n = 0;
  for (const TensorInfo* t : ckpt.tensors())
    if (t->name.rfind(prefix, 0) == 0) n += size_t(shape_numel(t->shape));
  return n;
}

size_t Component::stored_bytes() const {
  size_t n = 0;
  for (const TensorInfo* t : ckpt.tensors())
    if (t->name.rfind(prefix, 0) == 0) n += t->end - t->begin;
  return n;
}

std::string Component::dominant_dtype() const {
  std::map<std::string, size_t> by;
  for (const TensorInfo* t : ckpt.tensors())
    if (t->name.rfind(prefix, 0) == 0)
      by[t->ggml_type >= 0 ? ggml_type(uint32_t(t->ggml_type))->name : dtype_name(t->dtype)] += size_t(shape_numel(t->shape));
  std::string best = "-";
  size_t n = 0;
  for (auto& [k, c] : by)
    if (c > n) best = k, n = c;
  return best;
}

bool detect_turbo(const std::string& dir) {
  std::string name = lower(fs::path(fs::absolute(dir)).lexically_normal().string());
  if (name.find("turbo") != std::string::npos) return true;
  try {
    json j = read_json_file((fs::path(dir) / "model_index.json").string());
    if (j.contains("_name_or_path") && j["_name_or_path"].is_string())
      return lower(j["_name_or_path"].get<std::string>()).find("turbo") != std::string::npos;
  } catch (const Error&) {
  }
  return false;
}

namespace {
json component_config(const std::string& root, const std::string& comp) {
  fs::path dir = fs::path(root) / comp;
  ERNIE_CHECK(fs::is_directory(dir), dir.string(), ": component folder '", comp, "' is missing");
  return read_json_file((dir / "config.json").string());
}

// A config's layer counts bounded by what its checkpoint can hold (every layer has tensors), before the
// expected-tensor lists are built from them: a config cannot make us build billions of names.
void check_layers(const Component& c, int64_t layers, const char* field) {
  const size_t have = c.ckpt.tensors().size();
  ERNIE_CHECK(layers <= int64_t(have), c.name, "/config.json: ", field, " = ", std::to_string(layers),
              ", but the checkpoint holds only ", std::to_string(have), " tensors");
}
void check_layers(const Component& dit, const Component& te, const Component& vae, const ModelFolder& m) {
  check_layers(dit, m.dit.num_layers, "num_layers");
  check_layers(te, m.text_encoder.num_hidden_layers, "num_hidden_layers");
  check_layers(vae, int64_t(m.vae.block_out_channels.size()) * (m.vae.layers_per_block + 1), "layers_per_block");
}

// Files people pass as --model that are not models: named, instead of a safetensors header error.
void sniff_not_a_model(const std::string& path) {
  const std::string head = read_file_head(path, 12);
  ERNIE_CHECK(head.rfind("\x89PNG", 0) != 0, path, ": a PNG image, not a model (give a model folder or a file "
              "written by `ernie-image convert`)");
  ERNIE_CHECK(head.rfind("\xff\xd8\xff", 0) != 0, path, ": a JPEG image, not a model");
  ERNIE_CHECK(head.rfind("GIF8", 0) != 0, path, ": a GIF image, not a model");
  ERNIE_CHECK(!(head.size() == 12 && head.rfind("RIFF", 0) == 0 && head.compare(8, 4, "WEBP") == 0), path,
              ": a WebP image, not a model");
  // A bare pickle (protocol 2 to 5): a legacy PyTorch .pt/.bin; only safetensors and GGUF are read. A safetensors
  // header length can start with the same two bytes, but its JSON header then opens at byte 8.
  const bool json_at_8 = head.size() > 8 && head[8] == '{';
  ERNIE_CHECK(!(head.size() >= 2 && head[0] == '\x80' && head[1] >= 2 && head[1] <= 5 && !json_at_8), path,
              ": a Python pickle (a PyTorch .pt/.bin?), not a model; use the safetensors files");
  ERNIE_CHECK(head.rfind("GGUF", 0) != 0, path, ": a GGUF file; a GGUF DiT is given with --diffusion-model, and --model "
              "is still a model folder or a file written by `ernie-image convert`");
  ERNIE_CHECK(head.rfind("PK\x03\x04", 0) != 0, path, ": a zip archive (a PyTorch .pt/.ckpt?), not a model; use the safetensors files");
}

// Each model_index.json entry names a component as [library, class] (or null); anything else is not a
// diffusers index.
void check_model_index(const json& idx, const std::string& path) {
  for (auto it = idx.begin(); it != idx.end(); ++it) {
    if (it.key().rfind('_', 0) == 0) continue;  // _class_name, _diffusers_version, _name_or_path
    const json& v = it.value();
    const bool pair = v.is_array() && v.size() == 2 && (v[0].is_string() || v[0].is_null()) &&
                      (v[1].is_string() || v[1].is_null());
    ERNIE_CHECK(v.is_null() || pair || v.is_boolean(), path, ": entry '", it.key(), "' = ", v.dump(120),
                " is not [library, class]");
  }
}

// The prefix under which the language model's tensors live in a text encoder / PE checkpoint.
std::string resolve_prefix(const Checkpoint& ck, const std::vector<std::string>& candidates) {
  for (const std::string& p : candidates)
    if (ck.contains(p + "embed_tokens.weight")) return p;
  return candidates.front();
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

ModelFolder ModelFolder::open(const std::string& dir, bool with_pe, const ComponentFiles& files) {
  try {
    if (dir.empty()) return open_files(files);
    ModelFolder m = open_checked(dir, with_pe);
    m.use_files(files, false);
    return m;
  } catch (const fs::filesystem_error& e) {  // a symlink loop, a path too long, permissions
    fail(dir.empty() ? files.diffusion_model : dir, ": ", e.code().message(),
         e.path1().empty() ? "" : " (" + e.path1().string() + ")");
  }
}

namespace {
bool is_gguf(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec) && read_file_head(path, 4) == "GGUF";
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

ModelFolder ModelFolder::open_checked(const std::string& dir, bool with_pe) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  ERNIE_CHECK(!ec || ec == std::errc::no_such_file_or_directory, dir, ": ", ec.message());
  if (fs::is_regular_file(st)) {
    sniff_not_a_model(dir);
    return open_single_file(dir, with_pe);
  }
  ModelFolder m;
  m.root = fs::absolute(dir).lexically_normal().string();
  ERNIE_CHECK(fs::is_directory(m.root), dir, ": model folder not found");
  const std::string index_path = (fs::path(m.root) / "model_index.json").string();
  check_model_index(read_json_file(index_path), index_path);
  m.turbo = detect_turbo(m.root);
  auto path_of = [&](const std::string& c) { return (fs::path(m.root) / c / "config.json").string(); };

  m.dit = parse_dit_config(component_config(m.root, "transformer"), path_of("transformer"));
  m.text_encoder = parse_mistral_config(component_config(m.root, "text_encoder"), path_of("text_encoder"));
  m.vae = parse_vae_config(component_config(m.root, "vae"), path_of("vae"));
  std::string sched = (fs::path(m.root) / "scheduler" / "scheduler_config.json").string();
  ERNIE_CHECK(fs::exists(sched), sched, ": missing (component folder 'scheduler')");
  m.scheduler = parse_scheduler_config(read_json_file(sched), sched);
  m.tokenizer_dir = (fs::path(m.root) / "tokenizer").string();
  ERNIE_CHECK(fs::exists(fs::path(m.tokenizer_dir) / "tokenizer.json"), m.tokenizer_dir,
              "/tokenizer.json: missing (component folder 'tokenizer')");

  auto open_comp = [&](const std::string& name) {
    Component c;
    c.name = name;
    c.dir = (fs::path(m.root) / name).string();
    c.ckpt = Checkpoint::open_dir(c.dir);
    return c;
  };
  m.transformer_c = open_comp("transformer");
  m.text_encoder_c = open_comp("text_encoder");
  m.vae_c = open_comp("vae");
  check_layers(m.transformer_c, m.text_encoder_c, m.vae_c, m);
  m.transformer_c.specs = dit_tensor_specs(m.dit);
  m.text_encoder_c.prefix =
      resolve_prefix(m.text_encoder_c.ckpt, {"language_model.model.", "model.language_model.", "model.", ""});
  m.text_encoder_c.specs = mistral_tensor_specs(m.text_encoder, false);
  m.vae_c.specs = vae_tensor_specs(m.vae);

  if (with_pe && fs::is_directory(fs::path(m.root) / "pe")) {
    m.pe = parse_mistral_config(component_config(m.root, "pe"), path_of("pe"));
    m.pe_c = open_comp("pe");
    check_layers(*m.pe_c, m.pe->num_hidden_layers, "num_hidden_layers");
    m.pe_c->prefix = resolve_prefix(m.pe_c->ckpt, {"model.", "language_model.model.", "model.language_model.", ""});
    m.pe_c->specs = mistral_tensor_specs(*m.pe, true);
    fs::path pt = fs::path(m.root) / "pe_tokenizer";
    m.pe_tokenizer_rel = "pe_tokenizer";
    if (!fs::exists(pt / "tokenizer.json")) pt = fs::path(m.root) / "pe", m.pe_tokenizer_rel = "pe";
    if (fs::exists(pt / "tokenizer.json")) m.pe_tokenizer_dir = pt.string();
    else m.pe_tokenizer_rel.clear();
  }
  return m;
}

ModelFolder ModelFolder::open_single_file(const std::string& path, bool with_pe) {
  ModelFolder m;
  m.root = fs::absolute(path).lexically_normal().string();
  m.file_ = SafeTensorsFile::open(m.root);
  auto fmt = m.file_->metadata().find("format");
  ERNIE_CHECK(fmt != m.file_->metadata().end() && fmt->second.rfind("ernie-image/", 0) == 0, path,
              ": not an ernie-image converted model (metadata 'format' missing; convert it with `ernie-image convert`)");
  ERNIE_CHECK(fmt->second == "ernie-image/1", path, ": converted with a newer format '", fmt->second,
              "'; this build reads ernie-image/1");
  auto cfg = [&](const std::string& rel) {
    std::string text = m.read_file(rel);
    json j = json::parse(text, nullptr, false);
    ERNIE_CHECK(!j.is_discarded() && j.is_object(), path, ": embedded ", rel, " is not a JSON object");
    return j;
  };
  auto where = [&](const std::string& rel) { return path + ":" + rel; };
  m.turbo = m.file_->metadata().count("variant") && m.file_->metadata().at("variant") == "turbo";
  m.dit = parse_dit_config(cfg("transformer/config.json"), where("transformer/config.json"));
  m.text_encoder = parse_mistral_config(cfg("text_encoder/config.json"), where("text_encoder/config.json"));
  m.vae = parse_vae_config(cfg("vae/config.json"), where("vae/config.json"));
  m.scheduler = parse_scheduler_config(cfg("scheduler/scheduler_config.json"), where("scheduler/scheduler_config.json"));
  ERNIE_CHECK(m.has_file("tokenizer/tokenizer.json"), path, ": embedded tokenizer/tokenizer.json is missing");
  Checkpoint all;
  all = Checkpoint::open_file(m.root);  // one mapping shared by every component
  auto comp = [&](const std::string& name, const std::vector<std::string>& prefixes) {
    Component c;
    c.name = name;
    c.root = name + "/";
    c.ckpt = all;
    std::vector<std::string> full;
    for (const std::string& p : prefixes) full.push_back(c.root + p);
    c.prefix = full.size() == 1 ? full[0] : resolve_prefix(all, full);
    return c;
  };
  m.transformer_c = comp("transformer", {""});
  m.text_encoder_c = comp("text_encoder", {"language_model.model.", "model.language_model.", "model.", ""});
  m.vae_c = comp("vae", {""});
  check_layers(m.transformer_c, m.text_encoder_c, m.vae_c, m);
  m.transformer_c.specs = dit_tensor_specs(m.dit);
  m.text_encoder_c.specs = mistral_tensor_specs(m.text_encoder, false);
  m.vae_c.specs = vae_tensor_specs(m.vae);
  if (with_pe && m.has_file("pe/config.json")) {
    m.pe = parse_mistral_config(cfg("pe/config.json"), where("pe/config.json"));
    m.pe_c = comp("pe", {"model.", "language_model.model.", "model.language_model.", ""});
    check_layers(*m.pe_c, m.pe->num_hidden_layers, "num_hidden_layers");
    m.pe_c->specs = mistral_tensor_specs(*m.pe, true);
    for (const char* rel : {"pe_tokenizer", "pe"})
      if (m.pe_tokenizer_rel.empty() && m.has_file(std::string(rel) + "/tokenizer.json")) m.pe_tokenizer_rel = rel;
  }
  return m;
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
  check_layers(c, dit.num_layers, "num_layers");
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
    check_layers(c, text_encoder.num_hidden_layers, "num_hidden_layers");
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
  check_layers(c, text_encoder.num_hidden_layers, "num_hidden_layers");
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
  check_layers(c, int64_t(vae.block_out_channels.size()) * (vae.layers_per_block + 1), "layers_per_block");
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

std::string Component::stored_name(const std::string& name) const {
  auto it = renames.find(name);
  return prefix + (it == renames.end() ? name : it->second);
}

namespace {
// --tokenizer's file for "tokenizer/tokenizer.json", and the files beside it for "tokenizer/...".
std::string tokenizer_override(const std::string& tokenizer_file, const std::string& rel) {
  if (tokenizer_file.empty() || rel.rfind("tokenizer/", 0) != 0) return "";
  if (rel == "tokenizer/tokenizer.json") return tokenizer_file;
  return (fs::path(tokenizer_file).parent_path() / rel.substr(10)).string();
}
}  // namespace

bool ModelFolder::has_file(const std::string& rel) const {
  if (tokenizer_texts.count(rel)) return true;
  if (!tokenizer_texts.empty() && rel.rfind("tokenizer/", 0) == 0) return false;
  if (std::string f = tokenizer_override(tokenizer_file, rel); !f.empty()) {
    std::error_code ec;
    return fs::is_regular_file(f, ec);
  }
  if (from_files) return false;
  if (file_) return file_->metadata().count("file:" + rel) > 0;
  return fs::is_regular_file(fs::path(root) / rel);
}

bool ModelFolder::has_prompt_enhancer() const {
  if (pe_c) return true;
  if (file_) return has_file("pe/config.json");
  std::error_code ec;
  return fs::is_directory(fs::path(root) / "pe", ec);
}

std::string ModelFolder::read_file(const std::string& rel) const {
  if (auto it = tokenizer_texts.find(rel); it != tokenizer_texts.end()) return it->second;
  if (std::string f = tokenizer_override(tokenizer_file, rel); !f.empty()) return read_regular_file(f, kMaxJsonFileBytes);
  ERNIE_CHECK(!from_files, rel, ": not available: the model is component files, without --model");
  if (file_) {
    auto it = file_->metadata().find("file:" + rel);
    ERNIE_CHECK(it != file_->metadata().end(), root, ": converted model has no embedded '", rel, "'");
    return it->second;
  }
  return read_regular_file((fs::path(root) / rel).string(), kMaxJsonFileBytes);
}

Tensor Component::tensor(const std::string& name) const {
  auto [q, scale] = quantized(name);
  return scale.defined() ? dequantize_rows(q, scale) : q;
}

std::pair<Tensor, Tensor> Component::quantized(const std::string& name) const {
  const std::string full = stored_name(name);
  Tensor t = ckpt.tensor(full);
  if (conv_as_linear.count(name) && t.ndim() == 4) t = t.reshape({t.dim(0), t.dim(1)});  // [O, I, 1, 1]
  if (!is_quantized(name)) return {t, Tensor()};
  return {t, ckpt.tensor(full + "_scale")};
}

std::pair<Tensor, const TensorInfo*> Component::stored_blocks(const std::string& name) const {
  const std::string full = stored_name(name);
  return {ckpt.stored_blocks(full), ckpt.find(full)};
}

Tensor Component::input_scale(const std::string& name) const {
  const std::string full = stored_name(name) + "_input_scale";
  if (!ckpt.contains(full)) return Tensor();
  const Tensor s = ckpt.tensor(full).to_f32();
  ERNIE_CHECK(s.numel() == 1 && std::isfinite(s.f32()[0]) && s.f32()[0] > 0.f, full,
              ": a static activation scale must be one finite positive value");
  ERNIE_CHECK(is_quantized(name) && ckpt.find(stored_name(name))->dtype == DType::F8_E4M3, full,
              ": a static activation scale belongs to an fp8 weight, and '", stored_name(name), "' is not one");
  return s;
}

namespace {
void check_component(const Component& c, std::vector<Problem>& out) {
  std::map<std::string, const TensorSpec*> want;
  for (const TensorSpec& s : c.specs) {
    // "@name" means: outside the language-model prefix (lm_head sits next to "model.").
    std::string full = s.name[0] == '@' ? c.root + s.name.substr(1) : c.stored_name(s.name);
    want[full] = &s;
    const TensorInfo* ti = c.ckpt.find(full);
    if (!ti) {
      if (s.required) out.push_back({c.name, "missing tensor '" + full + "' " + shape_str(s.shape)});
      continue;
    }
    if (const TensorInfo* sc = c.ckpt.find(full + "_scale")) {  // a quantized weight and its row scales
      want[full + "_scale"] = &s;
      if (sc->shape != Shape{s.shape.empty() ? 0 : s.shape[0]} || sc->dtype != DType::F32 ||
          (ti->dtype != DType::F8_E4M3 && ti->dtype != DType::I8))
        out.push_back({c.name, "quantized tensor '" + full + "' (" + dtype_name(ti->dtype) + ") has a malformed scale " +
                                   shape_str(sc->shape) + " " + dtype_name(sc->dtype)});
    }
    if (const TensorInfo* is = c.ckpt.find(full + "_input_scale")) {  // a static activation scale (fp8 only)
      want[full + "_input_scale"] = &s;
      if (shape_numel(is->shape) != 1 || is->dtype != DType::F32 || ti->dtype != DType::F8_E4M3 ||
          !want.count(full + "_scale"))
        out.push_back({c.name, "static activation scale '" + full + "_input_scale' " + shape_str(is->shape) + " " +
                                   dtype_name(is->dtype) + " must be one F32 value of an fp8 weight"});
    }
    const bool conv1x1 = c.conv_as_linear.count(s.name) && s.shape.size() == 2 &&
                         ti->shape == Shape{s.shape[0], s.shape[1], 1, 1};
    if (ti->shape != s.shape && !conv1x1)
      out.push_back({c.name, "tensor '" + full + "' has shape " + shape_str(ti->shape) + ", the config implies " +
                                 shape_str(s.shape) + " (" + ti->file + ")"});
    if (!dtype_is_float(ti->dtype) && s.name != "bn.num_batches_tracked" && !want.count(full + "_scale"))
      out.push_back({c.name, "tensor '" + full + "' has non-float dtype " + std::string(dtype_name(ti->dtype))});
  }
  size_t unexpected = 0;
  std::string names;
  for (const TensorInfo* ti : c.ckpt.tensors()) {
    if (want.count(ti->name) || ti->name.rfind(c.root, 0) != 0) continue;
    if (++unexpected <= 3) names += (unexpected > 1 ? ", '" : "'") + ti->name + "'";
  }
  if (unexpected)
    out.push_back({c.name, std::to_string(unexpected) + " unexpected tensor(s) ignored (" +
                               (unexpected <= 3 ? names : "e.g. " + names) + ")" +
                               (c.source.empty() ? "" : " in " + c.source),
                   false});
}
}  // namespace

std::vector<Problem> ModelFolder::check() const {
  std::vector<Problem> out;
  check_component(transformer_c, out);
  check_component(text_encoder_c, out);
  check_component(vae_c, out);
  if (pe_c) check_component(*pe_c, out);
  if (dit.in_channels != vae.latent_channels * vae.patch_size[0] * vae.patch_size[1])
    out.push_back({"transformer", "in_channels " + I(dit.in_channels) + " != 4 x vae latent_channels " +
                                      I(vae.latent_channels) + " (vae/config.json)"});
  if (dit.out_channels != dit.in_channels)
    out.push_back({"transformer", "out_channels " + I(dit.out_channels) + " != in_channels " + I(dit.in_channels)});
  if (dit.text_in_dim != text_encoder.hidden_size)
    out.push_back({"transformer", "text_in_dim " + I(dit.text_in_dim) + " != text encoder hidden_size " +
                                      I(text_encoder.hidden_size) + " (text_encoder/config.json)"});
  if (text_encoder.num_hidden_layers < 2)
    out.push_back({"text_encoder", "num_hidden_layers must be >= 2 (the pipeline takes hidden_states[-2])"});
  return out;
}

void ModelFolder::require_ok(const std::string& component) const {
  const Component* c = component == "transformer" ? &transformer_c : component == "text_encoder" ? &text_encoder_c
                       : component == "vae" ? &vae_c : nullptr;
  for (const Problem& p : check())
    if (p.fatal && p.component == component) {
      if (c && !c->source.empty()) fail(c->source, " (", component, "): ", p.message);
      fail(root, "/", component, ": ", p.message);
    }
}

}  // namespace ernie
