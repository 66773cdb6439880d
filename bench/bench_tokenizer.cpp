// bench_tokenizer: writes a synthetic tokenizer.json the size of ERNIE-Image's (131,072 tokens, ~130k merges,
// 1,000 added special tokens, the Tekken pre-tokenizer regex, ignore_merges) and times loading it and
// encoding / decoding a ~2,000-token Chinese + English prompt. Prints one JSON object.
// Usage: bench_tokenizer [--keep DIR]   (--keep writes the synthetic tokenizer to DIR and leaves it there)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include <time.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

namespace {
using nlohmann::json;
namespace fs = std::filesystem;

constexpr size_t kVocab = 131072, kSpecials = 1000;
constexpr const char* kTekken =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?"
    "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

std::string byte_level(std::string_view raw) {
  std::string s;
  for (unsigned char c : raw) ernie::text::append_utf8(s, ernie::text::byte_to_code_point(c));
  return s;
}
std::vector<std::string> symbols(std::string_view raw) {  // one byte-level character per byte
  std::vector<std::string> out;
  for (unsigned char c : raw) out.push_back(byte_level(std::string_view(reinterpret_cast<const char*>(&c), 1)));
  return out;
}

struct Synthetic {
  std::vector<std::string> english;  // words, raw text
  std::vector<std::string> chinese;  // characters and two-character words, raw text
  std::vector<std::pair<std::string, std::string>> merges;
  std::unordered_set<std::string> have;

  // Adds the left-to-right chain of merges that builds `syms` into one token.
  void add_chain(const std::vector<std::string>& syms) {
    std::string cur = syms[0];
    for (size_t k = 1; k < syms.size(); ++k) {
      std::string next = cur + syms[k];
      if (have.insert(next).second) merges.emplace_back(cur, syms[k]);
      cur = std::move(next);
    }
  }

  std::string tokenizer_json() {
    std::mt19937 rng(42);
    const char* onsets[] = {"b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w",
                            "st", "tr", "pl", "gr", "ch", "sh", "th", "br", "cl"};
    const char* vowels[] = {"a", "e", "i", "o", "u", "ea", "ou", "ai", "io", "y"};
    const char* codas[] = {"", "", "n", "r", "s", "t", "l", "ng", "st", "rd", "ck"};
    auto pick = [&](auto& arr) { return arr[std::uniform_int_distribution<size_t>(0, std::size(arr) - 1)(rng)]; };
    // CJK characters: 3 bytes each, merged byte by byte; then common two-character words.
    for (char32_t cp = 0x4E00; cp <= 0x9FA5; ++cp) {
      std::string c;
      ernie::text::append_utf8(c, cp);
      add_chain(symbols(c));
      if (cp < 0x4E00 + 3000) chinese.push_back(c);
    }
    for (int i = 0; i < 25000; ++i) {
      std::string a = chinese[std::uniform_int_distribution<size_t>(0, 2999)(rng)];
      std::string b = chinese[std::uniform_int_distribution<size_t>(0, 2999)(rng)];
      if (have.insert(byte_level(a + b)).second) merges.emplace_back(byte_level(a), byte_level(b));
      if (i < 3000) chinese.push_back(a + b);
    }
    // English-like words, with and without the leading space, merged left to right.
    while (kSpecials + 256 + merges.size() < kVocab + 20000) {
      std::string w;
      for (int s = std::uniform_int_distribution<int>(1, 3)(rng); s > 0; --s) w += std::string(pick(onsets)) + pick(vowels) + pick(codas);
      if (english.size() < 20000) english.push_back(w);
      add_chain(symbols(w));
      add_chain(symbols(" " + w));
    }
    // Shorter tokens first so every merge's parts rank before it; then cut to the vocabulary size.
    std::stable_sort(merges.begin(), merges.end(),
                     [](auto& x, auto& y) { return x.first.size() + x.second.size() < y.first.size() + y.second.size(); });
    merges.resize(kVocab - kSpecials - 256);

    json vocab = json::object(), added = json::array(), jm = json::array();
    std::vector<std::string> named = {"<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]",
                                      "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]",
                                      "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]", "[PREFIX]", "[MIDDLE]", "[SUFFIX]",
                                      "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]"};
    for (size_t i = named.size(); i < kSpecials; ++i) named.push_back("<SPECIAL_" + std::to_string(i) + ">");
    int64_t id = 0;
    for (auto& s : named) {
      added.push_back({{"id", id}, {"content", s}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", false}, {"special", true}});
      vocab[s] = id++;
    }
    for (unsigned b = 0; b < 256; ++b) {
      unsigned char c = static_cast<unsigned char>(b);
      vocab[byte_level(std::string_view(reinterpret_cast<const char*>(&c), 1))] = id++;
    }
    for (auto& [a, b] : merges) {
      vocab[a + b] = id++;
      jm.push_back(json::array({a, b}));
    }
    json pre = {{"type", "Sequence"},
                {"pretokenizers", json::array({{{"type", "Split"}, {"pattern", {{"Regex", kTekken}}},
                                                {"behavior", "Isolated"}, {"invert", false}},
                                               {{"type", "ByteLevel"}, {"add_prefix_space", false},
                                                {"trim_offsets", true}, {"use_regex", false}}})}};
    json post = {{"type", "TemplateProcessing"},
                 {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                         {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                 {"pair", json::array()},
                 {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
    json doc = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added},
                {"normalizer", nullptr}, {"pre_tokenizer", pre}, {"post_processor", post},
                {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
                {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"fuse_unk", false},
                           {"byte_fallback", false}, {"ignore_merges", true}, {"vocab", vocab}, {"merges", jm}}}};
    return doc.dump();
  }

  // Alternating English phrases and Chinese runs with punctuation and digits.
  std::string prompt(const ernie::Tokenizer& tok, size_t target_tokens) {
    std::mt19937 rng(7);
    std::string p;
    auto eng = [&] { return english[std::uniform_int_distribution<size_t>(0, english.size() - 1)(rng)]; };
    auto zh = [&] { return chinese[std::uniform_int_distribution<size_t>(0, chinese.size() - 1)(rng)]; };
    while (tok.encode(p, true, false).size() < target_tokens) {
      p += "A ";
      for (int i = 0; i < 8; ++i) p += eng() + (i == 3 ? ", " : " ");
      p += std::to_string(std::uniform_int_distribution<int>(1, 2048)(rng)) + "px. ";
      for (int i = 0; i < 10; ++i) p += zh();
      p += "，";
      for (int i = 0; i < 6; ++i) p += zh();
      p += "。\n";
    }
    return p;
  }
};

// This thread's CPU time: on a shared machine, wall time also counts the time other processes ran.
double cpu_ms() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
json stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto r3 = [](double x) { return std::round(x * 1000) / 1000; };
  return {{"min", r3(v.front())}, {"median", r3(v[v.size() / 2])}, {"runs", v.size()}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string keep;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--keep") keep = argv[i + 1];
  const fs::path dir = keep.empty() ? fs::temp_directory_path() / ("ernie-bench-tok-" + std::to_string(::getpid()))
                                    : fs::path(keep);
  fs::create_directories(dir);

  Synthetic syn;
  const std::string text = syn.tokenizer_json();
  ernie::write_file_atomic((dir / "tokenizer.json").string(), text);
  ernie::write_file_atomic((dir / "tokenizer_config.json").string(),
                           R"({"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>", )"
                           R"("model_max_length": 2048})");

  std::vector<double> load_ms, load_cpu;
  ernie::Tokenizer tok = ernie::Tokenizer::load(dir.string());
  for (int i = 0; i < 7; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    double c0 = cpu_ms();
    tok = ernie::Tokenizer::load(dir.string());
    load_ms.push_back(ms_since(t0));
    load_cpu.push_back(cpu_ms() - c0);
  }
  const std::string prompt = syn.prompt(tok, 2000);
  const std::vector<int64_t> ids = tok.encode(prompt, true, false);
  std::vector<double> enc_ms, enc_cpu, dec_ms;
  for (int i = 0; i < 200; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    double c0 = cpu_ms();
    auto r = tok.encode(prompt, true, false);
    enc_cpu.push_back(cpu_ms() - c0);
    enc_ms.push_back(ms_since(t0));
    if (r != ids) {
      std::fprintf(stderr, "encode is not deterministic\n");
      return 1;
    }
    t0 = std::chrono::steady_clock::now();
    std::string d = tok.decode(ids, true);
    dec_ms.push_back(ms_since(t0));
    if (d != prompt) {
      std::fprintf(stderr, "decode(encode(prompt)) != prompt\n");
      return 1;
    }
  }
  json out = {{"bench", "tokenizer"},
              {"vocab_size", tok.vocab_size()},
              {"merges", syn.merges.size()},
              {"file_bytes", text.size()},
              {"load_ms", stats(load_ms)},
              {"load_cpu_ms", stats(load_cpu)},
              {"prompt_bytes", prompt.size()},
              {"prompt_tokens", ids.size()},
              {"encode_ms", stats(enc_ms)},
              {"encode_cpu_ms", stats(enc_cpu)},
              {"decode_ms", stats(dec_ms)}};
  std::printf("%s\n", out.dump(2).c_str());
  if (keep.empty()) fs::remove_all(dir);
  return 0;
}
