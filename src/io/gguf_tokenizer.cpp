#include "io/gguf_tokenizer.h"

#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/error.h"
#include "text/unicode.h"

namespace ernie {

using json = nlohmann::json;

namespace {

// Mistral's Tekken pre-tokenizer split (what llama.cpp's "tekken" pre-type and the HF tokenizer.json use).
const char* const kTekkenRegex =
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// GGUF token types (llama.cpp's llama_token_type).
enum : int64_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

}  // namespace

std::pair<json, json> gguf_tokenizer_json(const std::map<std::string, GgufValue>& md, const std::string& where,
                                          size_t model_max_length) {
  auto get = [&](const std::string& key) -> const GgufValue* {
    auto it = md.find(key);
    return it == md.end() ? nullptr : &it->second;
  };
  auto need = [&](const std::string& key) -> const GgufValue& {
    const GgufValue* v = get(key);
    ERNIE_CHECK(v != nullptr, where, ": GGUF key '", key, "' is missing (the tokenizer)");
    return *v;
  };
  const std::string model = need("tokenizer.ggml.model").str("tokenizer.ggml.model");
  ERNIE_CHECK(model == "gpt2", where, ": tokenizer.ggml.model '", model,
              "' is not supported (only gpt2, the byte-level BPE of Mistral's Tekken tokenizer)");
  const std::string pre = get("tokenizer.ggml.pre") ? need("tokenizer.ggml.pre").str("tokenizer.ggml.pre") : "";
  ERNIE_CHECK(pre == "tekken", where, ": tokenizer.ggml.pre '", pre,
              "' is not supported (only tekken, Mistral's pre-tokenizer)");

  const std::vector<std::string> tokens = need("tokenizer.ggml.tokens").strings("tokenizer.ggml.tokens");
  ERNIE_CHECK(!tokens.empty(), where, ": tokenizer.ggml.tokens is empty");
  std::vector<int64_t> types(tokens.size(), kNormal);
  if (const GgufValue* t = get("tokenizer.ggml.token_type")) {
    types = t->integers("tokenizer.ggml.token_type");
    ERNIE_CHECK(types.size() == tokens.size(), where, ": tokenizer.ggml.token_type has ", std::to_string(types.size()),
                " entries for ", std::to_string(tokens.size()), " tokens");
  }
  const int64_t n = int64_t(tokens.size());
  auto token_id = [&](const char* key) -> int64_t {
    const std::string k = std::string("tokenizer.ggml.") + key;
    const GgufValue* v = get(k);
    if (!v) return -1;
    const int64_t id = v->integer(k);
    ERNIE_CHECK(id >= 0 && id < n, where, ": ", k, " ", std::to_string(id), " is not a token id (", std::to_string(n),
                " tokens)");
    return id;
  };
  const int64_t bos = token_id("bos_token_id"), eos = token_id("eos_token_id"), unk = token_id("unknown_token_id"),
                pad = token_id("padding_token_id");
  auto flag = [&](const char* key, bool dflt) {
    const std::string k = std::string("tokenizer.ggml.") + key;
    const GgufValue* v = get(k);
    return v ? v->boolean(k) : dflt;
  };
  const bool add_bos = flag("add_bos_token", true), add_eos = flag("add_eos_token", false);
  ERNIE_CHECK(!add_bos || bos >= 0, where, ": tokenizer.ggml.add_bos_token is set but there is no bos_token_id");
  ERNIE_CHECK(!add_eos || eos >= 0, where, ": tokenizer.ggml.add_eos_token is set but there is no eos_token_id");

  json vocab = json::object();
  std::unordered_map<std::string, int64_t> seen;
  seen.reserve(tokens.size());
  json added = json::array();
  for (int64_t i = 0; i < n; ++i) {
    const std::string& tok = tokens[size_t(i)];
    ERNIE_CHECK(text::is_valid_utf8(tok), where, ": tokenizer.ggml.tokens[", std::to_string(i), "] is not valid UTF-8");
    auto [it, fresh] = seen.emplace(tok, i);
    ERNIE_CHECK(fresh, where, ": tokenizer.ggml.tokens has '", tok, "' twice (ids ", std::to_string(it->second), " and ",
                std::to_string(i), ")");
    vocab[tok] = i;
    const int64_t ty = types[size_t(i)];
    ERNIE_CHECK(ty >= kNormal && ty <= kByte, where, ": tokenizer.ggml.token_type[", std::to_string(i), "] is ",
                std::to_string(ty), " (1..6)");
    ERNIE_CHECK(ty != kByte, where, ": token ", std::to_string(i), " is a byte token (type 6), which a gpt2 tokenizer has not");
    if (ty == kUnknown || ty == kControl || ty == kUserDefined) {
      ERNIE_CHECK(!tok.empty(), where, ": added token ", std::to_string(i), " is empty");
      added.push_back({{"id", i}, {"content", tok}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", false}, {"special", ty != kUserDefined}});
    }
  }
  json merges = json::array();
  if (const GgufValue* m = get("tokenizer.ggml.merges")) {
    const std::vector<std::string> ms = m->strings("tokenizer.ggml.merges");
    for (size_t i = 0; i < ms.size(); ++i) {
      ERNIE_CHECK(text::is_valid_utf8(ms[i]), where, ": tokenizer.ggml.merges[", std::to_string(i), "] is not valid UTF-8");
      const size_t sp = ms[i].find(' ');
      ERNIE_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < ms[i].size() && ms[i].find(' ', sp + 1) == std::string::npos,
                  where, ": tokenizer.ggml.merges[", std::to_string(i), "] '", ms[i], "' is not two tokens 'a b'");
      merges.push_back(json::array({ms[i].substr(0, sp), ms[i].substr(sp + 1)}));
    }
  }

  json post = nullptr;
  if (add_bos || add_eos) {
    auto special = [](const std::string& s) { return json{{"SpecialToken", {{"id", s}, {"type_id", 0}}}}; };
    auto seq = [](const char* s) { return json{{"Sequence", {{"id", s}, {"type_id", 0}}}}; };
    json single = json::array(), pair = json::array(), specials = json::object();
    if (add_bos) {
      const std::string& b = tokens[size_t(bos)];
      single.push_back(special(b));
      pair.push_back(special(b));
      specials[b] = {{"id", b}, {"ids", json::array({bos})}, {"tokens", json::array({b})}};
    }
    single.push_back(seq("A"));
    pair.push_back(seq("A"));
    pair.push_back(seq("B"));
    if (add_eos) {
      const std::string& e = tokens[size_t(eos)];
      single.push_back(special(e));
      pair.push_back(special(e));
      specials[e] = {{"id", e}, {"ids", json::array({eos})}, {"tokens", json::array({e})}};
    }
    post = {{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}, {"special_tokens", specials}};
  }

  json tj = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array({{{"type", "Split"}, {"pattern", {{"Regex", kTekkenRegex}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}})}}},
      {"post_processor", post},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", true},
        {"vocab", vocab}, {"merges", merges}}},
  };
  json cfg = json::object();
  if (model_max_length > 0) cfg["model_max_length"] = model_max_length;
  cfg["clean_up_tokenization_spaces"] = false;  // llama.cpp's tekken: no space clean-up
  if (bos >= 0) cfg["bos_token"] = tokens[size_t(bos)];
  if (eos >= 0) cfg["eos_token"] = tokens[size_t(eos)];
  if (unk >= 0) cfg["unk_token"] = tokens[size_t(unk)];
  if (pad >= 0) cfg["pad_token"] = tokens[size_t(pad)];
  return {std::move(tj), std::move(cfg)};
}

Tokenizer tokenizer_from_gguf_metadata(const std::map<std::string, GgufValue>& md, const std::string& where,
                                       size_t model_max_length) {
  auto [tj, cfg] = gguf_tokenizer_json(md, where, model_max_length);
  std::string tokenizer_json, config_json;
  try {
    tokenizer_json = tj.dump();
    config_json = cfg.dump();
  } catch (const json::exception& e) {
    fail(where, ": tokenizer.ggml.*: ", e.what());
  }
  return Tokenizer::from_json(tokenizer_json, config_json, where + ": tokenizer.ggml");
}

Tokenizer tokenizer_from_gguf(const GgufFile& f, size_t model_max_length) {
  return tokenizer_from_gguf_metadata(f.metadata(), f.path(), model_max_length);
}

}  // namespace ernie
