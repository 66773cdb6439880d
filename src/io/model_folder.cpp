#include "io/model_folder.h"

#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"
#include "core/ggml_types.h"
#include "core/json.h"
#include "io/layer_counts.h"
#include "io/model_file.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace ernie {

namespace {
std::string lower(std::string s) {
  for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

json component_config(const std::string& root, const std::string& comp) {
  fs::path dir = fs::path(root) / comp;
  ERNIE_CHECK(fs::is_directory(dir), dir.string(), ": component folder '", comp, "' is missing");
  return read_json_file((dir / "config.json").string());
}

void check_layers(const Component& dit, const Component& te, const Component& vae, const ModelFolder& m) {
  check_layer_count(dit, m.dit.num_layers, "num_layers");
  check_layer_count(te, m.text_encoder.num_hidden_layers, "num_hidden_layers");
  check_layer_count(vae, int64_t(m.vae.block_out_channels.size()) * (m.vae.layers_per_block + 1),
                    "layers_per_block");
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
}  // namespace

void check_layer_count(const Component& c, int64_t layers, const char* field) {
  const size_t have = c.ckpt.tensors().size();
  ERNIE_CHECK(layers <= int64_t(have), c.name, "/config.json: ", field, " = ", std::to_string(layers),
              ", but the checkpoint holds only ", std::to_string(have), " tensors");
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
    check_layer_count(*m.pe_c, m.pe->num_hidden_layers, "num_hidden_layers");
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
    check_layer_count(*m.pe_c, m.pe->num_hidden_layers, "num_hidden_layers");
    m.pe_c->specs = mistral_tensor_specs(*m.pe, true);
    for (const char* rel : {"pe_tokenizer", "pe"})
      if (m.pe_tokenizer_rel.empty() && m.has_file(std::string(rel) + "/tokenizer.json")) m.pe_tokenizer_rel = rel;
  }
  return m;
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

}  // namespace ernie
