// tokenizer.json "added_tokens": literal tokens split out of the text before pre-tokenization, with their
// flags (special, lstrip, rstrip, single_word, normalized), matched leftmost-longest as tokenizers does.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "text/regex.h"

namespace ernie::text {

struct AddedToken {
  std::string content;
  int64_t id = -1;
  bool special = false, lstrip = false, rstrip = false, single_word = false, normalized = true;
};

// A piece of the input: either plain text [begin, end) or one added token (id >= 0) covering it.
struct Segment {
  size_t begin, end;
  int64_t id;
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  // `normalized_contents[i]` is tokens[i].content after the normalizer (used for normalized tokens).
  AddedVocabulary(std::vector<AddedToken> tokens, const std::vector<std::string>& normalized_contents);

  // Splits `text` around the tokens of one set (normalized=false tokens on raw text, normalized=true tokens
  // on normalized text), appending segments in order; empty text segments are left out.
  void split(std::string_view text, bool normalized_set, std::vector<Segment>& out) const;

  const AddedToken* by_id(int64_t id) const;
  const AddedToken* by_content(std::string_view content) const;
  bool is_special(std::string_view content) const { return special_.count(std::string(content)) > 0; }
  bool empty() const { return tokens_.empty(); }

 private:
  struct Trie {
    struct Node {
      std::vector<std::pair<unsigned char, int32_t>> next;
      int32_t token = -1;  // index into tokens_
    };
    std::vector<Node> nodes{Node{}};
    void insert(std::string_view s, int32_t token);
    // Longest token starting at text[pos]: its index and length, or -1.
    int32_t longest(std::string_view text, size_t pos, size_t* len) const;
  };
  std::vector<AddedToken> tokens_;
  Trie raw_, normalized_;
  std::unordered_map<int64_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
  std::unordered_set<std::string> special_;
  std::unique_ptr<Regex> word_char_;  // matches one word character; only when a token is single_word
};

}  // namespace ernie::text
