// The BPE model of a HuggingFace tokenizer.json: vocabulary, ranked merges, ignore_merges, byte_fallback,
// unk_token (optionally fused). Turns one pre-tokenized piece into ids exactly as tokenizers' BPE does.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/token_table.h"

namespace ernie::text {

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
  Bpe(TokenTable vocab, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions opt,
      const std::string& where);

  // Appends the ids of one pre-tokenized piece to `out`.
  void tokenize(std::string_view piece, std::vector<int64_t>& out) const;

  std::optional<int64_t> token_to_id(std::string_view token) const;
  std::optional<std::string_view> id_to_token(int64_t id) const;
  size_t vocab_size() const { return vocab_.size(); }

 private:
  void merge_word(std::vector<uint32_t>& ids) const;

  TokenTable vocab_;
  std::vector<TokenTable::Ref> id_to_token_;  // len 0 with off UINT32_MAX: no token
  MergeTable merges_;
  BpeOptions opt_;
  std::optional<int64_t> unk_id_;
  std::vector<int64_t> byte_fallback_ids_;  // id of "<0xXX>" per byte, -1 when absent (byte_fallback only)
};

}  // namespace ernie::text
