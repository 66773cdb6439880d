// A compiled PCRE2 pattern (UTF + Unicode properties, JIT when available) that iterates matches the way
// HuggingFace tokenizers' Oniguruma-backed regexes do.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ernie::text {

class Regex {
 public:
  // `what` names the pattern's origin for error messages ("tokenizer.json: pre_tokenizer Split pattern").
  // `\s` and `\S` are given Oniguruma's meaning (Unicode White_Space), which PCRE2's differs from.
  Regex(std::string_view pattern, const std::string& what);

  // All non-overlapping matches as byte ranges [begin, end). As Oniguruma's find_iter: an empty match right
  // where the previous match ended is skipped and the search moves on by one character.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
  // Whether the pattern matches anywhere in `text`.
  bool search(std::string_view text) const;

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
  std::string what_;
};

// A pattern that matches `literal` exactly.
std::string regex_escape(std::string_view literal);

}  // namespace ernie::text
