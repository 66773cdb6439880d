// libFuzzer target: encode arbitrary bytes. Invalid UTF-8 must be an Error; valid text must round-trip
// through a plain byte-level tokenizer exactly, and a tokenizer using every supported feature (NFC, added
// tokens with strip/single-word flags, byte fallback, templates, truncation) must never crash.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

namespace {
using nlohmann::json;

constexpr const char* kTekken =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?"
    "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

std::string byte_char(unsigned b) {
  std::string s;
  ernie::text::append_utf8(s, ernie::text::byte_to_code_point(uint8_t(b)));
  return s;
}

// Byte-level vocabulary plus merges building a few words ("Ġthe", "in", "一" from its three bytes).
json base(bool rich) {
  json vocab = json::object(), merges = json::array();
  int64_t id = 0;
  for (const char* s : {"<unk>", "<s>", "</s>", "[INST]", "[/INST]"}) vocab[s] = id++;
  for (unsigned b = 0; b < 256; ++b) vocab[byte_char(b)] = id++;
  auto merge = [&](const std::string& a, const std::string& b) {
    if (!vocab.contains(a + b)) vocab[a + b] = id++;
    merges.push_back(json::array({a, b}));
  };
  const std::string G = byte_char(' ');
  merge(G, "t"), merge("h", "e"), merge(G + "t", "he"), merge("i", "n");
  merge(byte_char(0xE4), byte_char(0xB8)), merge(byte_char(0xE4) + byte_char(0xB8), byte_char(0x80));
  json added = json::array();
  int64_t aid = 0;
  for (const char* s : {"<unk>", "<s>", "</s>", "[INST]", "[/INST]"})
    added.push_back({{"id", aid++}, {"content", s}, {"special", true}, {"normalized", false}});
  json pre = {{"type", "Sequence"},
              {"pretokenizers",
               json::array({{{"type", "Split"}, {"pattern", {{"Regex", kTekken}}}, {"behavior", "Isolated"}, {"invert", false}},
                            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  json j = {{"added_tokens", added}, {"normalizer", nullptr}, {"pre_tokenizer", pre},
            {"post_processor",
             {{"type", "TemplateProcessing"},
              {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
              {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
            {"decoder", {{"type", "ByteLevel"}}},
            {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", true}}}};
  if (rich) {
    j["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "NFC"}}})}};
    for (auto [s, l, r, w] : {std::tuple{"<L>", true, false, false}, {"<R>", false, true, false}, {"cat", false, false, true}}) {
      j["model"]["vocab"][s] = id;
      j["added_tokens"].push_back({{"id", id++}, {"content", s}, {"lstrip", l}, {"rstrip", r}, {"single_word", w},
                                   {"normalized", std::string(s) == "cat"}, {"special", false}});
    }
    j["model"]["unk_token"] = "<unk>";
    j["model"]["byte_fallback"] = true;
    j["model"]["fuse_unk"] = true;
  }
  return j;
}

const ernie::Tokenizer& plain() {
  static const ernie::Tokenizer t = ernie::Tokenizer::from_json(base(false).dump());
  return t;
}
const ernie::Tokenizer& rich() {
  static const ernie::Tokenizer t = ernie::Tokenizer::from_json(base(true).dump(), R"({"model_max_length": 64})");
  return t;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool valid = ernie::text::is_valid_utf8(text);
  try {
    auto ids = plain().encode(text, false, false);
    if (!valid) __builtin_trap();  // invalid UTF-8 must be rejected
    // Without normalizer or strip flags, decoding with special tokens kept gives the text back exactly.
    if (plain().decode(ids, false) != text) __builtin_trap();
    auto r = rich().encode(text);
    if (r.size() > 64) __builtin_trap();  // truncation at model_max_length, BOS counted
    (void)rich().decode(r, true);
  } catch (const ernie::Error&) {
    if (valid) __builtin_trap();  // valid text must always encode
  }
  return 0;
}
