// The BPE model of a HuggingFace tokenizer.json: vocabulary, ranked merges, ignore_merges, byte_fallback,
// unk_token (optionally fused). Turns one pre-tokenized piece into ids exactly as tokenizers' BPE does.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ernie::text {

// Heterogeneous-lookup hash map from token text to id.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using VocabMap = std::unordered_map<std::string, int64_t, StringHash, std::equal_to<>>;

struct BpeOptions {
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  std::string continuing_subword_prefix;  // "" = none
  std::string end_of_word_suffix;         // "" = none
};

class Bpe {
 public:
  Bpe() = default;
  // `merges` in rank order; `where` names the file for errors (a merge naming a token that is not in the
  // vocabulary is an Error, as in tokenizers).
  Bpe(VocabMap vocab, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions opt,
      const std::string& where);

  // Appends the ids of one pre-tokenized piece to `out`.
  void tokenize(std::string_view piece, std::vector<int64_t>& out) const;

  std::optional<int64_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(int64_t id) const;  // nullptr when no token has this id
  size_t vocab_size() const { return vocab_.size(); }

 private:
  struct Merge {
    uint32_t rank;
    uint32_t new_id;
  };
  static uint64_t pair_key(uint32_t a, uint32_t b) { return (uint64_t(a) << 32) | b; }
  const Merge* find_merge(uint32_t a, uint32_t b) const;
  void merge_word(std::vector<uint32_t>& ids) const;

  VocabMap vocab_;
  std::vector<const std::string*> id_to_token_;  // points at vocab_ keys (stable in unordered_map)
  std::unordered_map<uint64_t, Merge> merges_;
  BpeOptions opt_;
  std::optional<int64_t> unk_id_;
  std::vector<int64_t> byte_fallback_ids_;  // id of "<0xXX>" per byte, -1 when absent (byte_fallback only)
};

}  // namespace ernie::text
