#include "text/tokenizer.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"
#include "core/json.h"
#include "text/added_tokens.h"
#include "text/bpe.h"
#include "text/decoder.h"
#include "text/normalizer.h"
#include "text/post_processor.h"
#include "text/pre_tokenizer.h"
#include "text/tokenizer_json.h"
#include "text/unicode.h"

namespace ernie {

using nlohmann::json;
using namespace text;

struct Tokenizer::Impl {
  std::string where;
  Bpe model;
  AddedVocabulary added;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  PostProcessor post_processor;
  Decoder decoder;
  size_t extra_added = 0;  // added tokens outside the model vocabulary
  size_t max_length = 0;
  int64_t bos = -1, eos = -1, pad = -1, unk = -1;
  bool clean_up_spaces = false;

  std::optional<int64_t> token_to_id(std::string_view t) const {
    if (const AddedToken* a = added.by_content(t)) return a->id;
    return model.token_to_id(t);
  }
  std::optional<std::string_view> id_to_token(int64_t id) const {
    if (const AddedToken* a = added.by_id(id)) return std::string_view(a->content);
    return model.id_to_token(id);
  }
};

namespace {

std::string read_file(const std::filesystem::path& p) { return read_regular_file(p.string(), kMaxJsonFileBytes); }

template <class T>
T field(const json& j, const char* key, T def, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return def;
  try {
    return j[key].get<T>();
  } catch (const json::exception&) {
    fail(where, ": field \"", key, "\" has the wrong type");
  }
}

Bpe build_model(TokenizerJson& tj, const std::string& where) {
  ERNIE_CHECK(tj.doc.contains("model") && tj.doc["model"].is_object(), where,
              ": missing \"model\" section (a BPE model with vocab and merges)");
  const json& m = tj.doc["model"];
  const std::string type = field<std::string>(m, "type", "BPE", where + " model");
  ERNIE_CHECK(type == "BPE", where, ": model type \"", type, "\" is not supported (supported: BPE)");
  ERNIE_CHECK(tj.has_vocab, where, ": model has no \"vocab\"");
  ERNIE_CHECK(tj.has_merges, where, ": model has no \"merges\"");
  if (m.contains("dropout") && !m["dropout"].is_null()) {
    ERNIE_CHECK(m["dropout"].is_number() && m["dropout"].get<double>() == 0.0, where,
                ": model dropout is not supported (encoding must be deterministic)");
  }
  BpeOptions opt;
  if (m.contains("unk_token") && !m["unk_token"].is_null()) {
    ERNIE_CHECK(m["unk_token"].is_string(), where, ": model unk_token must be a string or null");
    opt.unk_token = m["unk_token"].get<std::string>();
  }
  opt.fuse_unk = field<bool>(m, "fuse_unk", false, where + " model");
  opt.byte_fallback = field<bool>(m, "byte_fallback", false, where + " model");
  opt.ignore_merges = field<bool>(m, "ignore_merges", false, where + " model");
  opt.continuing_subword_prefix = field<std::string>(m, "continuing_subword_prefix", "", where + " model");
  opt.end_of_word_suffix = field<std::string>(m, "end_of_word_suffix", "", where + " model");
  Bpe bpe(std::move(tj.vocab), tj.merges, std::move(opt), where);
  tj.merges.clear();
  tj.merges.shrink_to_fit();
  return bpe;
}

// added_tokens: ids as tokenizers assigns them (the model's id when the content is in its vocabulary, else
// the next free id after the vocabulary).
AddedVocabulary build_added(const json& doc, const Bpe& model, const Normalizer& normalizer, size_t* extra,
                            const std::string& where) {
  std::vector<AddedToken> tokens;
  std::vector<std::string> normalized;
  if (!doc.contains("added_tokens") || doc["added_tokens"].is_null()) return {};
  ERNIE_CHECK(doc["added_tokens"].is_array(), where, ": \"added_tokens\" must be a list");
  int64_t next_id = int64_t(model.vocab_size());
  std::unordered_map<std::string, int64_t> seen;
  for (const json& t : doc["added_tokens"]) {
    const std::string w = where + " added_tokens";
    ERNIE_CHECK(t.is_object() && t.contains("content") && t["content"].is_string(), w,
                ": each entry needs a string \"content\"");
    AddedToken a;
    a.content = t["content"].get<std::string>();
    if (a.content.empty()) continue;
    a.special = field<bool>(t, "special", false, w);
    a.lstrip = field<bool>(t, "lstrip", false, w);
    a.rstrip = field<bool>(t, "rstrip", false, w);
    a.single_word = field<bool>(t, "single_word", false, w);
    a.normalized = field<bool>(t, "normalized", !a.special, w);
    if (auto it = seen.find(a.content); it != seen.end()) {
      a.id = it->second;
    } else if (auto id = model.token_to_id(a.content)) {
      a.id = *id;
    } else {
      a.id = next_id++;
      ++*extra;
    }
    seen.emplace(a.content, a.id);
    normalized.push_back(a.normalized && !normalizer.empty() ? normalizer.apply(a.content) : a.content);
    tokens.push_back(std::move(a));
  }
  return AddedVocabulary(std::move(tokens), normalized);
}

// A special token named in tokenizer_config.json: a string or {"content": ...}.
int64_t config_token(const AddedVocabulary& added, const Bpe& model, const json& cfg, const char* key,
                     const std::string& where) {
  if (!cfg.contains(key) || cfg[key].is_null()) return -1;
  const json& v = cfg[key];
  std::string name;
  if (v.is_string()) name = v.get<std::string>();
  else if (v.is_object() && v.contains("content") && v["content"].is_string()) name = v["content"].get<std::string>();
  else fail(where, ": \"", key, "\" must be a token string or {\"content\": ...}");
  std::optional<int64_t> id;
  if (const AddedToken* a = added.by_content(name)) id = a->id;
  else id = model.token_to_id(name);
  ERNIE_CHECK(id.has_value(), where, ": ", key, " \"", name, "\" is not in the tokenizer's vocabulary");
  return *id;
}

// transformers' clean_up_tokenization: removes the space before punctuation and English contractions.
std::string clean_up_tokenization(std::string s) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (auto [from, to] : kRules) {
    std::string out;
    const std::string_view f(from);
    size_t i = 0;
    for (size_t k; (k = s.find(f, i)) != std::string::npos; i = k + f.size()) out.append(s, i, k - i).append(to);
    out.append(s, i, std::string::npos);
    s = std::move(out);
  }
  return s;
}

}  // namespace

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json, const std::string& where) {
  auto impl = std::make_shared<Impl>();
  impl->where = where;
  TokenizerJson tj = parse_tokenizer_json(tokenizer_json, where);
  const json& doc = tj.doc;
  impl->model = build_model(tj, where);
  impl->normalizer = Normalizer::from_json(doc.value("normalizer", json()), where);
  impl->pre_tokenizer = PreTokenizer::from_json(doc.value("pre_tokenizer", json()), where);
  impl->post_processor = PostProcessor::from_json(doc.value("post_processor", json()), where);
  impl->decoder = Decoder::from_json(doc.value("decoder", json()), where);
  impl->added = build_added(doc, impl->model, impl->normalizer, &impl->extra_added, where);

  if (!config_json.empty()) {
    const std::string cw = where == "tokenizer.json" ? std::string("tokenizer_config.json")
                                                     : where.substr(0, where.rfind('/') + 1) + "tokenizer_config.json";
    json cfg;
    try {
      cfg = json::parse(config_json);
    } catch (const json::exception& e) {
      fail(cw, ": not valid JSON: ", e.what());
    }
    ERNIE_CHECK(cfg.is_object(), cw, ": the top level must be a JSON object");
    if (cfg.contains("model_max_length") && !cfg["model_max_length"].is_null()) {
      const json& v = cfg["model_max_length"];
      ERNIE_CHECK(v.is_number() && v.get<double>() >= 1, cw, ": model_max_length must be a positive number");
      // transformers writes "no limit" as a huge number (VERY_LARGE_INTEGER, 1e30).
      const double d = v.get<double>();
      impl->max_length = d >= 1e15 ? 0 : size_t(d);
    }
    impl->bos = config_token(impl->added, impl->model, cfg, "bos_token", cw);
    impl->eos = config_token(impl->added, impl->model, cfg, "eos_token", cw);
    impl->pad = config_token(impl->added, impl->model, cfg, "pad_token", cw);
    impl->unk = config_token(impl->added, impl->model, cfg, "unk_token", cw);
    impl->clean_up_spaces = field<bool>(cfg, "clean_up_tokenization_spaces", false, cw);
  }
  Tokenizer t;
  t.impl_ = std::move(impl);
  return t;
}

Tokenizer Tokenizer::load(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path tj = fs::path(dir) / "tokenizer.json", tc = fs::path(dir) / "tokenizer_config.json";
  ERNIE_CHECK(fs::exists(tj), tj.string(), ": not found (a tokenizer folder needs tokenizer.json)");
  std::string config = fs::exists(tc) ? read_file(tc) : std::string();
  if (!config.empty() && config.find_first_not_of(" \t\r\n") == std::string::npos) config.clear();
  return from_json(read_file(tj), config, tj.string());
}

std::vector<int64_t> Tokenizer::encode(std::string_view text, bool add_special_tokens, bool truncation) const {
  const Impl& m = *impl_;
  if (size_t bad = utf8_invalid_at(text); bad != std::string_view::npos) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned char>(text[bad]));
    fail("tokenizer: the text is not valid UTF-8 (byte ", hex, " at offset ", std::to_string(bad), ")");
  }
  std::vector<int64_t> ids;
  ids.reserve(text.size() / 2 + 4);
  std::vector<Segment> raw, inner;
  std::vector<std::string> pieces;
  m.added.split(text, false, raw);
  for (const Segment& s : raw) {
    if (s.id >= 0) {
      ids.push_back(s.id);
      continue;
    }
    std::string_view part = text.substr(s.begin, s.end - s.begin);
    std::string normalized;
    if (!m.normalizer.empty()) part = normalized = m.normalizer.apply(part);
    inner.clear();
    m.added.split(part, true, inner);
    for (const Segment& t : inner) {
      if (t.id >= 0) {
        ids.push_back(t.id);
        continue;
      }
      pieces.clear();
      m.pre_tokenizer.run(part.substr(t.begin, t.end - t.begin), pieces);
      for (const std::string& p : pieces) m.model.tokenize(p, ids);
    }
  }
  if (truncation && m.max_length > 0) {
    const size_t reserve = add_special_tokens ? m.post_processor.added_tokens() : 0;
    const size_t limit = m.max_length > reserve ? m.max_length - reserve : 0;
    if (ids.size() > limit) ids.resize(limit);
  }
  return m.post_processor.apply(std::move(ids), add_special_tokens);
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  const Impl& m = *impl_;
  std::vector<std::string_view> tokens;
  tokens.reserve(ids.size());
  for (int64_t id : ids) {
    ERNIE_CHECK(id >= 0, "tokenizer: cannot decode negative token id ", std::to_string(id));
    std::optional<std::string_view> t = m.id_to_token(id);
    if (!t) continue;
    if (skip_special_tokens && m.added.is_special(*t)) continue;
    tokens.push_back(*t);
  }
  std::string s = m.decoder.decode(tokens);
  return m.clean_up_spaces ? clean_up_tokenization(std::move(s)) : s;
}

int64_t Tokenizer::bos_id() const { return impl_->bos; }
int64_t Tokenizer::eos_id() const { return impl_->eos; }
int64_t Tokenizer::pad_id() const { return impl_->pad; }
int64_t Tokenizer::unk_id() const { return impl_->unk; }

std::optional<int64_t> Tokenizer::token_to_id(std::string_view token) const { return impl_->token_to_id(token); }

std::string Tokenizer::id_to_token(int64_t id) const {
  std::optional<std::string_view> t = impl_->id_to_token(id);
  ERNIE_CHECK(t.has_value(), "tokenizer: no token has id ", std::to_string(id));
  return std::string(*t);
}

bool Tokenizer::is_special(int64_t id) const {
  std::optional<std::string_view> t = impl_->id_to_token(id);
  return t && impl_->added.is_special(*t);
}

size_t Tokenizer::vocab_size() const { return impl_->model.vocab_size() + impl_->extra_added; }
size_t Tokenizer::model_max_length() const { return impl_->max_length; }

}  // namespace ernie
