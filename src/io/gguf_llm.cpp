#include "io/gguf_llm.h"

#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace ernie {

using json = nlohmann::json;

namespace {

// Architectures llama.cpp gives diffusion models (and ERNIE-Image's own): named in the error for a DiT file.
const std::set<std::string> kDiffusionArchs = {"wan", "ernie_image", "ernie-image", "flux", "sd1", "sdxl", "sd3",
                                               "aura", "hidream", "ltxv", "hyvid", "qwen_image", "lumina2", "chroma"};

std::string hf_layer(int i, const char* rest) { return "model.layers." + std::to_string(i) + "." + rest; }

// What the config reads of a GGUF: its metadata and tensor list (a GgufFile's, or a parsed header's).
struct GgufView {
  const std::map<std::string, GgufValue>& md;
  const std::vector<TensorInfo>& tensors;
  const std::string& where;
  const GgufValue* meta(const std::string& key) const {
    auto it = md.find(key);
    return it == md.end() ? nullptr : &it->second;
  }
  std::optional<std::string> meta_string(const std::string& key) const {
    const GgufValue* v = meta(key);
    if (!v) return std::nullopt;
    return v->str(key);
  }
  const TensorInfo* find(const std::string& name) const {
    for (const TensorInfo& t : tensors)
      if (t.name == name) return &t;
    return nullptr;
  }
  const std::string& path() const { return where; }
};

std::string llm_arch(const GgufView& f) {
  const std::optional<std::string> arch = f.meta_string("general.architecture");
  const bool has_embd = f.find("token_embd.weight") != nullptr;
  const char* expect = "a text encoder LLM GGUF (general.architecture llama or mistral3, as llama.cpp writes) is expected";
  if (!arch) {
    ERNIE_CHECK(has_embd, f.path(), ": no general.architecture and no token_embd.weight: this looks like a diffusion "
                "model (DiT) GGUF, where ", expect);
    fail(f.path(), ": no general.architecture; ", expect);
  }
  if (*arch == "llama" || *arch == "mistral3") {
    ERNIE_CHECK(has_embd, f.path(), ": general.architecture is '", *arch, "' but there is no token_embd.weight");
    return *arch;
  }
  ERNIE_CHECK(!kDiffusionArchs.count(*arch) && has_embd, f.path(), ": general.architecture '", *arch,
              "' is a diffusion model (DiT) GGUF, where ", expect);
  fail(f.path(), ": general.architecture '", *arch, "' is not supported for the text encoder (llama, mistral3)");
}

MistralConfig mistral_config(const GgufView& f) {
  const std::string arch = llm_arch(f);
  const std::string p = arch + ".";
  auto get = [&](const std::string& key) { return f.meta(p + key); };
  auto need = [&](const std::string& key, const char* what) -> const GgufValue& {
    const GgufValue* v = get(key);
    ERNIE_CHECK(v != nullptr, f.path(), ": GGUF key '", p + key, "' is missing (the text encoder's ", what, ")");
    return *v;
  };
  auto integer = [&](const std::string& key, const char* what) { return need(key, what).integer(p + key); };
  auto number = [&](const std::string& key, const char* what) {
    const double v = need(key, what).number(p + key);
    ERNIE_CHECK(std::isfinite(v), f.path(), ": GGUF key '", p + key, "' is not a finite number");
    return v;
  };

  // The values go through parse_mistral_config as the config.json a folder would hold, so a GGUF is checked
  // exactly as a folder is.
  json j;
  j["model_type"] = arch == "mistral3" ? "ministral3" : "mistral";
  j["hidden_size"] = integer("embedding_length", "hidden_size");
  j["num_hidden_layers"] = integer("block_count", "num_hidden_layers");
  j["intermediate_size"] = integer("feed_forward_length", "intermediate_size");
  const int64_t heads = integer("attention.head_count", "num_attention_heads");
  j["num_attention_heads"] = heads;
  j["num_key_value_heads"] = get("attention.head_count_kv") ? integer("attention.head_count_kv", "") : heads;
  if (get("attention.key_length")) {
    const int64_t kl = integer("attention.key_length", "head_dim");
    j["head_dim"] = kl;
    if (get("attention.value_length"))
      ERNIE_CHECK(integer("attention.value_length", "") == kl, f.path(), ": ", p, "attention.value_length differs from ",
                  p, "attention.key_length (not a Mistral model)");
  }
  j["rms_norm_eps"] = number("attention.layer_norm_rms_epsilon", "rms_norm_eps");
  if (get("context_length")) j["max_position_embeddings"] = integer("context_length", "");

  const TensorInfo* embd = f.find("token_embd.weight");
  ERNIE_CHECK(embd->shape.size() == 2, f.path(), ": token_embd.weight must be 2-D");
  j["vocab_size"] = embd->shape[0];
  if (get("vocab_size"))
    ERNIE_CHECK(integer("vocab_size", "") == embd->shape[0], f.path(), ": ", p, "vocab_size ",
                std::to_string(integer("vocab_size", "")), " differs from token_embd.weight's ",
                std::to_string(embd->shape[0]), " rows");
  j["tie_word_embeddings"] = f.find("output.weight") == nullptr;
  auto token_id = [&](const char* key, const char* field) {
    if (const GgufValue* v = f.meta(std::string("tokenizer.ggml.") + key))
      j[field] = v->integer(std::string("tokenizer.ggml.") + key);
  };
  token_id("bos_token_id", "bos_token_id");
  token_id("eos_token_id", "eos_token_id");
  token_id("padding_token_id", "pad_token_id");

  const double theta = get("rope.freq_base") ? number("rope.freq_base", "") : 10000.0;  // llama.cpp's default
  j["rope_theta"] = theta;
  std::string scaling = "none";
  if (get("rope.scaling.type")) scaling = need("rope.scaling.type", "").str(p + "rope.scaling.type");
  ERNIE_CHECK(!get("rope.scale_linear"), f.path(), ": ", p, "rope.scale_linear (linear RoPE scaling) is not supported");
  if (scaling == "yarn") {
    json r;
    r["rope_type"] = "yarn";
    r["rope_theta"] = theta;
    r["factor"] = number("rope.scaling.factor", "rope_parameters.factor");
    if (get("rope.scaling.original_context_length"))
      r["original_max_position_embeddings"] = integer("rope.scaling.original_context_length", "");
    if (get("rope.scaling.yarn_beta_fast")) r["beta_fast"] = number("rope.scaling.yarn_beta_fast", "");
    if (get("rope.scaling.yarn_beta_slow")) r["beta_slow"] = number("rope.scaling.yarn_beta_slow", "");
    // llama.cpp takes mscale as 1 and yarn_log_multiplier as mscale_all_dim (its converter writes
    // rope_parameters.mscale_all_dim there for Ministral-3); see the header for the key's absence.
    r["mscale"] = 1.0;
    r["mscale_all_dim"] = get("rope.scaling.yarn_log_multiplier") ? number("rope.scaling.yarn_log_multiplier", "") : 1.0;
    if (const GgufValue* af = get("rope.scaling.attn_factor"))
      ERNIE_CHECK(af->number(p + "rope.scaling.attn_factor") == 1.0, f.path(), ": ", p,
                  "rope.scaling.attn_factor other than 1 is not supported");
    if (arch == "mistral3") r["llama_4_scaling_beta"] = get("attention.temperature_scale")
                                                            ? number("attention.temperature_scale", "") : 0.0;
    j["rope_parameters"] = r;
  } else {
    ERNIE_CHECK(scaling == "none", f.path(), ": ", p, "rope.scaling.type '", scaling, "' is not supported (none, yarn)");
  }
  ERNIE_CHECK(arch != "mistral3" || scaling == "yarn" || !get("attention.temperature_scale") ||
                  number("attention.temperature_scale", "") == 0,
              f.path(), ": ", p, "attention.temperature_scale without YaRN is not supported");
  if (get("attention.temperature_length") && scaling == "yarn")
    ERNIE_CHECK(!get("rope.scaling.original_context_length") ||
                    integer("attention.temperature_length", "") == integer("rope.scaling.original_context_length", ""),
                f.path(), ": ", p, "attention.temperature_length other than rope.scaling.original_context_length is "
                "not supported");

  MistralConfig c = parse_mistral_config(j, f.path() + " (GGUF metadata)");
  if (get("rope.dimension_count"))
    ERNIE_CHECK(integer("rope.dimension_count", "") == c.head_dim, f.path(), ": ", p, "rope.dimension_count ",
                std::to_string(integer("rope.dimension_count", "")), " differs from the head size ",
                std::to_string(c.head_dim), " (partial rotary embeddings are not supported)");
  return c;
}

}  // namespace

std::string gguf_llm_arch(const GgufFile& f) { return llm_arch({f.metadata(), f.tensors(), f.path()}); }
MistralConfig gguf_mistral_config(const GgufFile& f) { return mistral_config({f.metadata(), f.tensors(), f.path()}); }
MistralConfig gguf_mistral_config(const GgufHeader& h, const std::string& where) {
  return mistral_config({h.metadata, h.tensors, where});
}

namespace {

// out row `dst(r)` = in row r, over [n_head * D, in] rows.
Tensor permute_rows(const Tensor& w, int n_head, bool inverse) {
  ERNIE_CHECK(w.device() == kCPU, "q/k permutation: the tensor must be on the host");
  ERNIE_CHECK(w.ndim() == 2 && n_head > 0 && w.dim(0) % n_head == 0 && (w.dim(0) / n_head) % 2 == 0,
              "q/k permutation: shape ", shape_str(w.shape()), " is not [n_head * even head_dim, in] for ",
              std::to_string(n_head), " heads");
  const int64_t D = w.dim(0) / n_head, half = D / 2;
  const size_t row = size_t(w.dim(1)) * dtype_size(w.dtype());
  Tensor out = Tensor::empty(w.shape(), w.dtype(), kCPU);
  const char* src = static_cast<const char*>(w.raw());
  char* dst = static_cast<char*>(out.raw());
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t jj = 0; jj < half; ++jj) {
        const int64_t hf = h * D + i * half + jj, gg = h * D + 2 * jj + i;  // HF row, GGUF row
        const int64_t from = inverse ? gg : hf, to = inverse ? hf : gg;
        std::memcpy(dst + size_t(to) * row, src + size_t(from) * row, row);
      }
  return out;
}

class GgufLlmAsHf : public TensorFile {
 public:
  GgufLlmAsHf(std::shared_ptr<GgufFile> f, const MistralConfig& c) : f_(std::move(f)) {
    ERNIE_CHECK(f_ != nullptr, "gguf_llm_as_hf: no file");
    struct Map {
      std::string gguf, hf;
      int heads;  // > 0: un-permute q/k rows
      bool required;
    };
    std::vector<Map> maps = {{"token_embd.weight", "model.embed_tokens.weight", 0, true},
                             {"output_norm.weight", "model.norm.weight", 0, true},
                             {"output.weight", "lm_head.weight", 0, false}};
    for (int i = 0; i < c.num_hidden_layers; ++i) {
      const std::string b = "blk." + std::to_string(i) + ".";
      maps.push_back({b + "attn_norm.weight", hf_layer(i, "input_layernorm.weight"), 0, true});
      maps.push_back({b + "attn_q.weight", hf_layer(i, "self_attn.q_proj.weight"), c.num_attention_heads, true});
      maps.push_back({b + "attn_k.weight", hf_layer(i, "self_attn.k_proj.weight"), c.num_key_value_heads, true});
      maps.push_back({b + "attn_v.weight", hf_layer(i, "self_attn.v_proj.weight"), 0, true});
      maps.push_back({b + "attn_output.weight", hf_layer(i, "self_attn.o_proj.weight"), 0, true});
      maps.push_back({b + "ffn_norm.weight", hf_layer(i, "post_attention_layernorm.weight"), 0, true});
      maps.push_back({b + "ffn_gate.weight", hf_layer(i, "mlp.gate_proj.weight"), 0, true});
      maps.push_back({b + "ffn_up.weight", hf_layer(i, "mlp.up_proj.weight"), 0, true});
      maps.push_back({b + "ffn_down.weight", hf_layer(i, "mlp.down_proj.weight"), 0, true});
    }
    std::set<std::string> known;
    for (const Map& m : maps) {
      known.insert(m.gguf);
      const TensorInfo* ti = f_->find(m.gguf);
      if (!ti) {
        ERNIE_CHECK(!m.required, f_->path(), ": tensor '", m.gguf, "' is missing (", std::to_string(c.num_hidden_layers),
                    " layers)");
        continue;
      }
      if (m.heads > 0) {
        const int64_t rows = int64_t(m.heads) * c.head_dim;
        ERNIE_CHECK(ti->shape.size() == 2 && ti->shape[0] == rows, f_->path(), ": tensor '", m.gguf, "' has shape ",
                    shape_str(ti->shape), ", expected ", std::to_string(rows), " rows (", std::to_string(m.heads),
                    " heads of ", std::to_string(c.head_dim), ")");
      }
      TensorInfo hi = *ti;
      hi.name = m.hf;
      index_[m.hf] = infos_.size();
      infos_.push_back(std::move(hi));
      src_.push_back({m.gguf, m.heads});
    }
    for (const TensorInfo& ti : f_->tensors())
      ERNIE_CHECK(known.count(ti.name), f_->path(), ": tensor '", ti.name, "' is not part of a ",
                  std::to_string(c.num_hidden_layers), "-layer Mistral/Llama LLM (not supported)");
  }
  const char* format() const override { return "gguf"; }
  const std::string& path() const override { return f_->path(); }
  size_t file_size() const override { return f_->file_size(); }
  const std::vector<TensorInfo>& tensors() const override { return infos_; }
  const TensorInfo* find(const std::string& name) const override {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &infos_[it->second];
  }
  Tensor tensor(const std::string& name) const override {
    auto it = index_.find(name);
    ERNIE_CHECK(it != index_.end(), f_->path(), ": no tensor '", name, "'");
    const auto& [gguf, heads] = src_[it->second];
    Tensor t = f_->tensor(gguf);
    return heads > 0 ? gguf_unpermute_qk(t, heads) : t;
  }

 private:
  std::shared_ptr<GgufFile> f_;
  std::vector<TensorInfo> infos_;
  std::vector<std::pair<std::string, int>> src_;
  std::map<std::string, size_t> index_;
};

}  // namespace

Tensor gguf_unpermute_qk(const Tensor& w, int n_head) { return permute_rows(w, n_head, true); }
Tensor gguf_permute_qk(const Tensor& w, int n_head) { return permute_rows(w, n_head, false); }

std::shared_ptr<TensorFile> gguf_llm_as_hf(std::shared_ptr<GgufFile> f, const MistralConfig& c) {
  return std::make_shared<GgufLlmAsHf>(std::move(f), c);
}

Component gguf_llm_component(std::shared_ptr<GgufFile> f, const MistralConfig& c, const std::string& name,
                             bool with_lm_head) {
  Component comp;
  comp.name = name;
  comp.root = "";
  comp.prefix = "model.";
  comp.ckpt = Checkpoint::of({gguf_llm_as_hf(std::move(f), c)});
  comp.specs = mistral_tensor_specs(c, with_lm_head);
  return comp;
}

}  // namespace ernie
