// Tokenizer: exact ids against the diffusers/transformers reference (golden data), decode of the prompt
// enhancer's output, round-trip and truncation properties, each tokenizer.json feature, and bad input.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "golden.h"
#include "text/nfc.h"
#include "text/pre_tokenizer.h"
#include "text/regex.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

namespace ernie {
namespace {

using nlohmann::json;
using test::error_of;
using test::golden_ids;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
const json& golden_doc() {
  static const json j = json::parse(slurp(test::golden_json()));
  return j;
}
std::string tok_dir() { return test::tiny_model() + "/tokenizer"; }
std::string pe_dir() { return test::tiny_model() + "/pe_tokenizer"; }
json tiny_json() { return json::parse(slurp(tok_dir() + "/tokenizer.json")); }
std::string tiny_config() { return slurp(tok_dir() + "/tokenizer_config.json"); }

// A small hand-made tokenizer.json: byte-level alphabet, the given merges, optional pre-tokenizer.
json make_json(const std::vector<std::pair<std::string, std::string>>& merges, json pre = nullptr) {
  json vocab = json::object();
  int64_t id = 0;
  for (unsigned b = 0; b < 256; ++b) {
    std::string s;
    text::append_utf8(s, text::byte_to_code_point(uint8_t(b)));
    vocab[s] = id++;
  }
  json m = json::array();
  for (auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = id++;
    m.push_back(json::array({a, b}));
  }
  if (pre.is_null()) pre = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  return {{"version", "1.0"},       {"added_tokens", json::array()}, {"normalizer", nullptr},
          {"pre_tokenizer", pre},   {"post_processor", nullptr},      {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}, {"unk_token", nullptr}}}};
}
Tokenizer from(const json& j, const std::string& config = "") { return Tokenizer::from_json(j.dump(), config); }

// ---- golden data from the reference -----------------------------------------------------------------------

TEST(Tokenizer, MatchesReferenceIdsForEveryGoldenCase) {
  Tokenizer tok = Tokenizer::load(tok_dir());
  const json& cases = golden_doc()["tokenizer_cases"];
  ASSERT_GE(cases.size(), 10u);
  for (size_t n = 0; n < cases.size(); ++n) {
    const std::string text = cases[n].get<std::string>();
    EXPECT_EQ(tok.encode(text), golden_ids("tok." + std::to_string(n) + ".ids")) << "case " << n << ": " << text;
  }
}

TEST(Tokenizer, MatchesReferencePromptEnhancerIds) {
  Tokenizer tok = Tokenizer::load(pe_dir());
  const json& cases = golden_doc()["pe_cases"];
  ASSERT_FALSE(cases.empty());
  for (size_t n = 0; n < cases.size(); ++n) {
    const std::string rendered = cases[n]["rendered"].get<std::string>();
    const auto expected = golden_ids("pe." + std::to_string(n) + ".prompt_ids");
    // The rendered template starts with a literal "<s>" and the post-processor adds another: two BOS.
    ASSERT_GE(expected.size(), 2u);
    EXPECT_EQ(expected[0], tok.bos_id());
    EXPECT_EQ(expected[1], tok.bos_id());
    EXPECT_EQ(tok.encode(rendered), expected) << "pe case " << n;
  }
}

TEST(Tokenizer, DecodesPromptEnhancerOutputLikeReference) {
  Tokenizer tok = Tokenizer::load(pe_dir());
  const json& cases = golden_doc()["pe_cases"];
  for (size_t n = 0; n < cases.size(); ++n) {
    const auto ids = golden_ids("pe." + std::to_string(n) + ".generated_ids");
    const std::string decoded = tok.decode(ids, /*skip_special_tokens=*/true);
    EXPECT_EQ(decoded, cases[n]["decoded"].get<std::string>()) << "pe case " << n;
    EXPECT_NE(decoded.find("\xEF\xBF\xBD"), std::string::npos) << "golden output has U+FFFD runs";
  }
}

TEST(Tokenizer, ReadsSpecialTokensAndLengthFromConfig) {
  Tokenizer tok = Tokenizer::load(tok_dir());
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.pad_id(), 11);
  EXPECT_EQ(tok.unk_id(), 0);
  EXPECT_EQ(tok.model_max_length(), 2048u);
  EXPECT_EQ(tok.token_to_id("[INST]"), 3);
  EXPECT_EQ(tok.id_to_token(3), "[INST]");
  EXPECT_TRUE(tok.is_special(3));
  EXPECT_FALSE(tok.is_special(84));
  EXPECT_EQ(tok.vocab_size(), tiny_json()["model"]["vocab"].size());
  EXPECT_FALSE(tok.token_to_id("no such token").has_value());
  EXPECT_FALSE(error_of([&] { tok.id_to_token(1 << 20); }).empty());
}

// ---- properties ---------------------------------------------------------------------------------------------

std::string random_text(std::mt19937& rng, size_t max_chars) {
  static const std::pair<char32_t, char32_t> ranges[] = {
      {0x20, 0x7E}, {0x09, 0x0D}, {0x00, 0x1F},  {0xA0, 0x17F},    {0x300, 0x36F},  {0x4E00, 0x9FFF},
      {0x3040, 0x30FF}, {0xAC00, 0xD7A3}, {0x1F300, 0x1F6FF}, {0x2000, 0x206F}, {0x180E, 0x180E}, {0x10000, 0x10FFFF}};
  std::uniform_int_distribution<size_t> len(0, max_chars), pick(0, std::size(ranges) - 1);
  std::string s;
  for (size_t n = len(rng); n > 0; --n) {
    auto [lo, hi] = ranges[pick(rng)];
    char32_t cp = std::uniform_int_distribution<char32_t>(lo, hi)(rng);
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
    text::append_utf8(s, cp);
  }
  return s;
}

TEST(Tokenizer, DecodeOfEncodeIsIdentityForRandomUnicode) {
  Tokenizer tok = Tokenizer::load(tok_dir());
  std::mt19937 rng(1234);
  for (int i = 0; i < 300; ++i) {
    const std::string s = random_text(rng, 40);
    ASSERT_EQ(tok.decode(tok.encode(s, false), false), s) << "round " << i;
    const auto with_bos = tok.encode(s, true);
    ASSERT_EQ(with_bos.front(), 1);
    ASSERT_EQ(tok.decode(with_bos, true), s) << "round " << i;
    ASSERT_EQ(tok.decode(with_bos, false), "<s>" + s) << "round " << i;
  }
}

TEST(Tokenizer, TruncatesAtModelMaxLengthCountingSpecialTokens) {
  Tokenizer tok = Tokenizer::load(tok_dir());
  std::string text;
  for (int i = 0; i < 1500; ++i) text += "a cat, 一只猫 ";
  const auto full = tok.encode(text, true, /*truncation=*/false);
  ASSERT_GT(full.size(), 2048u);
  const auto cut = tok.encode(text);
  ASSERT_EQ(cut.size(), 2048u);
  EXPECT_EQ(cut.front(), 1);
  EXPECT_TRUE(std::equal(cut.begin(), cut.end(), full.begin()));
  const auto plain = tok.encode(text, false);
  ASSERT_EQ(plain.size(), 2048u);
  EXPECT_TRUE(std::equal(plain.begin(), plain.end(), full.begin() + 1));

  Tokenizer small = Tokenizer::from_json(slurp(tok_dir() + "/tokenizer.json"), R"({"model_max_length": 4})");
  EXPECT_EQ(small.encode("a cat sat on the mat"), std::vector<int64_t>(full.begin(), full.begin() + 4));
  EXPECT_EQ(small.encode("a"), tok.encode("a"));  // shorter than the limit: untouched
}

TEST(Tokenizer, EmptyTextGivesOnlyWhatThePostProcessorAdds) {
  Tokenizer tok = Tokenizer::load(tok_dir());
  EXPECT_EQ(tok.encode(""), std::vector<int64_t>{1});
  EXPECT_TRUE(tok.encode("", false).empty());
  json j = tiny_json();
  j["post_processor"] = nullptr;
  EXPECT_TRUE(from(j).encode("").empty());
  EXPECT_EQ(tok.decode({}, false), "");
}

TEST(Tokenizer, StringAndPairMergeFormsGiveTheSameIds) {
  json j = tiny_json();
  json strings = json::array();
  for (auto& m : j["model"]["merges"]) strings.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
  j["model"]["merges"] = strings;
  Tokenizer a = Tokenizer::load(tok_dir()), b = from(j, tiny_config());
  for (auto& c : golden_doc()["tokenizer_cases"]) EXPECT_EQ(a.encode(c.get<std::string>()), b.encode(c.get<std::string>()));
}

// ---- features of tokenizer.json ---------------------------------------------------------------------------

TEST(Tokenizer, IgnoreMergesEmitsWholeVocabularyPieces) {
  // "abc" is in the vocabulary but no merge builds it from "ab"+"c" (only "a"+"bc").
  json j = make_json({{"b", "c"}, {"a", "b"}});
  j["model"]["vocab"]["abc"] = 300;
  Tokenizer merges_only = from(j);
  const int64_t a = *merges_only.token_to_id("a"), bc = *merges_only.token_to_id("bc");
  EXPECT_EQ(merges_only.encode("abc"), (std::vector<int64_t>{a, bc}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(from(j).encode("abc"), std::vector<int64_t>{300});
}

TEST(Tokenizer, MergesApplyByRankLeftmostFirst) {
  Tokenizer t = from(make_json({{"a", "a"}, {"aa", "a"}}));
  const int64_t aa = *t.token_to_id("aa"), aaa = *t.token_to_id("aaa"), a = *t.token_to_id("a");
  EXPECT_EQ(t.encode("aaaa"), (std::vector<int64_t>{aa, aa}));
  EXPECT_EQ(t.encode("aaaaa"), (std::vector<int64_t>{aa, aaa}));
  EXPECT_EQ(t.encode("aaa"), std::vector<int64_t>{aaa});
  EXPECT_NE(aa, a);
}

TEST(Tokenizer, ByteFallbackAndUnknownTokens) {
  // Vocabulary without byte-level mapping: plain characters, "<0xXX>" byte tokens, <unk>.
  json vocab = {{"<unk>", 0}, {"a", 1}, {"b", 2}, {"<0xC3>", 3}, {"<0xA9>", 4}};
  json j = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}, {"unk_token", "<unk>"}}}};
  EXPECT_EQ(from(j).encode("aéb"), (std::vector<int64_t>{1, 0, 2}));
  EXPECT_EQ(from(j).encode("aééb"), (std::vector<int64_t>{1, 0, 0, 2}));
  j["model"]["fuse_unk"] = true;
  EXPECT_EQ(from(j).encode("aééb"), (std::vector<int64_t>{1, 0, 2}));
  j["model"]["byte_fallback"] = true;
  EXPECT_EQ(from(j).encode("aéb"), (std::vector<int64_t>{1, 3, 4, 2}));
  EXPECT_EQ(from(j).encode("a€b"), (std::vector<int64_t>{1, 0, 2}));  // no byte tokens for €: unk
  j["model"]["unk_token"] = nullptr;
  EXPECT_EQ(from(j).encode("a€b"), (std::vector<int64_t>{1, 2}));  // no unk_token: dropped, as tokenizers
}

TEST(Tokenizer, AddedTokenFlags) {
  json j = make_json({});
  auto add = [&](const std::string& content, int id, bool lstrip, bool rstrip, bool single_word, bool special) {
    j["model"]["vocab"][content] = id;
    j["added_tokens"].push_back({{"id", id}, {"content", content}, {"lstrip", lstrip}, {"rstrip", rstrip},
                                 {"single_word", single_word}, {"normalized", false}, {"special", special}});
  };
  add("<L>", 300, true, false, false, true);
  add("<R>", 301, false, true, false, true);
  add("cat", 302, false, false, true, false);
  add("<LL>", 303, false, false, false, true);
  Tokenizer t = from(j);
  const int64_t sp = *t.token_to_id("\xC4\xA0");  // byte-level space
  const int64_t x = *t.token_to_id("x");
  EXPECT_EQ(t.encode("x  <L>x"), (std::vector<int64_t>{x, 300, x}));        // lstrip eats the spaces before
  EXPECT_EQ(t.encode("x<R>  x"), (std::vector<int64_t>{x, 301, x}));        // rstrip eats the spaces after
  EXPECT_EQ(t.encode("x <R>"), (std::vector<int64_t>{x, sp, 301}));
  EXPECT_EQ(t.encode("a cat"), (std::vector<int64_t>{*t.token_to_id("a"), sp, 302}));
  EXPECT_NE(t.encode("concatenate")[0], 302);                                // single_word: not inside a word
  EXPECT_EQ(t.encode("<LL>"), std::vector<int64_t>{303});                    // longest match wins
  EXPECT_EQ(t.decode({300, 302}, true), "cat");                              // only special tokens are skipped
  EXPECT_EQ(t.decode({300, 302}, false), "<L>cat");
}

TEST(Tokenizer, NormalizedAddedTokensMatchAfterNfc) {
  json j = make_json({});
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "NFC"}}})}};
  j["model"]["vocab"]["\xC3\xA9t\xC3\xA9"] = 300;  // "été" precomposed
  j["added_tokens"].push_back({{"id", 300}, {"content", "\xC3\xA9t\xC3\xA9"}, {"normalized", true}, {"special", false}});
  Tokenizer t = from(j);
  EXPECT_EQ(t.encode("e\xCC\x81te\xCC\x81"), std::vector<int64_t>{300});  // decomposed input composes first
  EXPECT_EQ(t.decode(t.encode("Cafe\xCC\x81"), false), "Caf\xC3\xA9");
}

TEST(Tokenizer, NfcMatchesUnicodeReferenceCases) {
  auto u8 = [](std::u32string s) {
    std::string o;
    for (char32_t c : s) text::append_utf8(o, c);
    return o;
  };
  EXPECT_EQ(text::nfc(u8(U"e\u0301")), u8(U"\u00E9"));
  EXPECT_EQ(text::nfc(u8(U"\u1100\u1161\u11A8")), u8(U"\uAC01"));       // Hangul L V T
  EXPECT_EQ(text::nfc(u8(U"\uAC00\u11A8")), u8(U"\uAC01"));             // Hangul LV + T
  EXPECT_EQ(text::nfc(u8(U"a\u0302\u0323")), u8(U"\u1EAD"));            // reordered marks compose
  EXPECT_EQ(text::nfc(u8(U"\u212B")), u8(U"\u00C5"));                   // singleton
  EXPECT_EQ(text::nfc(u8(U"\u0958")), u8(U"\u0915\u093C"));             // composition exclusion
  EXPECT_EQ(text::nfc(u8(U"A\u030A\u0301")), u8(U"\u01FA"));
  EXPECT_EQ(text::nfc(u8(U"\u1E0B\u0323")), u8(U"\u1E0D\u0307"));
  EXPECT_EQ(text::nfc(u8(U"q\u0307\u0323")), u8(U"q\u0323\u0307"));
  EXPECT_EQ(text::nfc(u8(U"\u0344")), u8(U"\u0308\u0301"));
  EXPECT_EQ(text::nfc("plain ascii"), "plain ascii");
}

std::vector<std::string> split_with(const std::string& behavior, bool invert, const std::string& text) {
  json j = {{"type", "Split"}, {"pattern", {{"Regex", "\\w+|[^\\w\\s]+"}}}, {"behavior", behavior}, {"invert", invert}};
  std::vector<std::string> out;
  text::PreTokenizer::from_json(j, "test").run(text, out);
  return out;
}

TEST(Tokenizer, SplitBehaviorsMatchTokenizers) {
  using V = std::vector<std::string>;
  const std::string s = "How are you doing?";
  EXPECT_EQ(split_with("Removed", true, s), (V{"How", "are", "you", "doing", "?"}));
  EXPECT_EQ(split_with("Isolated", true, s), (V{"How", " ", "are", " ", "you", " ", "doing", "?"}));
  EXPECT_EQ(split_with("MergedWithPrevious", true, s), (V{"How ", "are ", "you ", "doing", "?"}));
  EXPECT_EQ(split_with("MergedWithNext", true, s), (V{"How", " are", " you", " doing", "?"}));
  EXPECT_EQ(split_with("Contiguous", true, s), (V{"How", " ", "are", " ", "you", " ", "doing?"}));
  EXPECT_EQ(split_with("Removed", false, s), (V{" ", " ", " "}));
}

TEST(Tokenizer, ByteLevelPreTokenizerWithItsOwnRegex) {
  auto run = [](json j, const std::string& text) {
    std::vector<std::string> out;
    text::PreTokenizer::from_json(j, "test").run(text, out);
    return out;
  };
  using V = std::vector<std::string>;
  json bl = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  EXPECT_EQ(run(bl, "Hello world's  ok"), (V{"Hello", "\xC4\xA0world", "'s", "\xC4\xA0", "\xC4\xA0ok"}));
  bl["add_prefix_space"] = true;
  EXPECT_EQ(run(bl, "Hi"), (V{"\xC4\xA0Hi"}));
  bl["use_regex"] = false;
  EXPECT_EQ(run(bl, "a b\n"), (V{"\xC4\xA0" "a\xC4\xA0" "b\xC4\x8A"}));
  bl["add_prefix_space"] = false;
  EXPECT_EQ(run(bl, "a b\n"), (V{"a\xC4\xA0" "b\xC4\x8A"}));
}

TEST(Tokenizer, WhitespaceClassFollowsOniguruma) {
  // U+180E is not White_Space (Oniguruma, Rust) though PCRE2's own \s matches it.
  json j = {{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Removed"}, {"invert", false}};
  std::vector<std::string> out;
  text::PreTokenizer::from_json(j, "test").run("a\xE1\xA0\x8E" "b c", out);
  EXPECT_EQ(out, (std::vector<std::string>{"a\xE1\xA0\x8E" "b", "c"}));
}

TEST(Tokenizer, RegexIteratesEmptyMatchesLikeOniguruma) {
  using M = std::vector<std::pair<size_t, size_t>>;
  text::Regex re("a*", "test");
  // An empty match right after the previous match is skipped; the search moves on one character.
  EXPECT_EQ(re.find_all("baaa"), (M{{0, 0}, {1, 4}}));
  EXPECT_EQ(re.find_all("\xE4\xB8\x80" "a"), (M{{0, 0}, {3, 4}}));  // steps over a whole character
  EXPECT_EQ(re.find_all(""), (M{{0, 0}}));
}

TEST(Tokenizer, LossyDecodeReplacesEachMaximalInvalidRun) {
  EXPECT_EQ(text::utf8_lossy("a\xE4\xB8z"), "a\xEF\xBF\xBDz");                          // truncated 3-byte: one
  EXPECT_EQ(text::utf8_lossy("\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // lone continuations: each
  EXPECT_EQ(text::utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate: three
  EXPECT_EQ(text::utf8_lossy("\xF0\x9F\x90"), "\xEF\xBF\xBD");                           // truncated at end: one
  EXPECT_EQ(text::utf8_lossy("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // overlong: two
  EXPECT_EQ(text::utf8_lossy("\xF0\x9F\x90\xB1"), "\xF0\x9F\x90\xB1");
}

// ---- bad input ---------------------------------------------------------------------------------------------

TEST(Tokenizer, RejectsBadFilesAndTextWithClearErrors) {
  json j = tiny_json();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "[a-";
  EXPECT_NE(error_of([&] { from(j); }).find("invalid regex"), std::string::npos);

  j = tiny_json();
  j["model"]["merges"].push_back(json::array({"nope", "t"}));
  EXPECT_NE(error_of([&] { from(j); }).find("\"nope\", which is not in model.vocab"), std::string::npos);

  j = tiny_json();
  j.erase("model");
  EXPECT_NE(error_of([&] { from(j); }).find("missing \"model\""), std::string::npos);

  j = tiny_json();
  j["model"]["merges"][0] = "in";
  EXPECT_NE(error_of([&] { from(j); }).find("not two tokens"), std::string::npos);

  j = tiny_json();
  j["decoder"] = {{"type", "Metaspace"}};
  EXPECT_NE(error_of([&] { from(j); }).find("decoder type \"Metaspace\" is not supported"), std::string::npos);

  j = tiny_json();
  j["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_NE(error_of([&] { from(j); }).find("not supported"), std::string::npos);

  j = tiny_json();
  j["model"]["type"] = "WordPiece";
  EXPECT_NE(error_of([&] { from(j); }).find("model type \"WordPiece\""), std::string::npos);

  EXPECT_NE(error_of([&] { Tokenizer::from_json("{\"model\": "); }).find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of([&] { Tokenizer::load("/nonexistent-dir"); }).find("not found"), std::string::npos);
  EXPECT_NE(error_of([&] { from(tiny_json(), R"({"bos_token": "<nope>"})"); }).find("<nope>"), std::string::npos);

  Tokenizer tok = Tokenizer::load(tok_dir());
  EXPECT_NE(error_of([&] { tok.encode("ok \xFF bad"); }).find("not valid UTF-8 (byte 0xFF at offset 3)"),
            std::string::npos);
  EXPECT_FALSE(error_of([&] { tok.encode("\xED\xA0\x80"); }).empty());  // encoded surrogate
  EXPECT_FALSE(error_of([&] { tok.decode({-1}, false); }).empty());
}

}  // namespace
}  // namespace ernie
