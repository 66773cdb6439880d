#include "text/added_tokens.h"

#include "text/unicode.h"

namespace ernie::text {
namespace {

// Rust regex \w: Alphabetic, marks, decimal digits, connector punctuation, joiners.
constexpr const char* kWord = "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]";

// Start of the run of White_Space characters that ends `s` (s.size() when there is none).
size_t trailing_space_start(std::string_view s) {
  size_t start = s.size();
  size_t i = 0;
  while (i < s.size()) {
    size_t at = i;
    char32_t cp = next_code_point(s, i);
    if (is_white_space(cp)) {
      if (start == s.size()) start = at;
    } else {
      start = s.size();
    }
  }
  return start;
}

// Length of the run of White_Space characters that starts `s`.
size_t leading_space_len(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t at = i;
    if (!is_white_space(next_code_point(s, i))) return at;
  }
  return s.size();
}

}  // namespace

void AddedVocabulary::Trie::insert(std::string_view s, int32_t token) {
  int32_t n = 0;
  for (unsigned char c : s) {
    int32_t child = -1;
    for (auto& [b, k] : nodes[size_t(n)].next)
      if (b == c) child = k;
    if (child < 0) {
      child = int32_t(nodes.size());
      nodes[size_t(n)].next.emplace_back(c, child);
      nodes.emplace_back();
    }
    n = child;
  }
  if (nodes[size_t(n)].token < 0) nodes[size_t(n)].token = token;
}

int32_t AddedVocabulary::Trie::longest(std::string_view text, size_t pos, size_t* len) const {
  int32_t n = 0, best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    int32_t child = -1;
    for (auto& [b, k] : nodes[size_t(n)].next)
      if (b == c) {
        child = k;
        break;
      }
    if (child < 0) break;
    n = child;
    if (nodes[size_t(n)].token >= 0) {
      best = nodes[size_t(n)].token;
      *len = i + 1 - pos;
    }
  }
  return best;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const std::vector<std::string>& normalized_contents)
    : tokens_(std::move(tokens)) {
  bool single_word = false;
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    if (t.content.empty()) continue;  // tokenizers ignores empty added tokens
    if (t.normalized) normalized_.insert(normalized_contents[i], int32_t(i));
    else raw_.insert(t.content, int32_t(i));
    by_id_.emplace(t.id, i);
    by_content_.emplace(t.content, i);
    if (t.special) special_.insert(t.content);
    single_word = single_word || t.single_word;
  }
  if (single_word) {
    word_char_ = std::make_unique<Regex>(std::string("^") + kWord, "added token word check");
  }
}

const AddedToken* AddedVocabulary::by_id(int64_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::by_content(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

void AddedVocabulary::split(std::string_view text, bool normalized_set, std::vector<Segment>& out) const {
  const Trie& trie = normalized_set ? normalized_ : raw_;
  size_t done = 0;  // text before this offset has been emitted
  size_t pos = 0;
  while (pos < text.size()) {
    size_t len = 0;
    int32_t k = trie.longest(text, pos, &len);
    if (k < 0) {
      ++pos;
      continue;
    }
    const AddedToken& t = tokens_[size_t(k)];
    size_t start = pos, stop = pos + len;
    pos = stop;  // matches never overlap, whether or not this one is kept
    if (t.single_word) {
      size_t last = start;  // first byte of the character before the match
      while (last > 0 && (static_cast<unsigned char>(text[--last]) & 0xC0) == 0x80) {
      }
      bool start_ok = start == 0 || !word_char_->search(text.substr(last, start - last));
      bool stop_ok = stop == text.size() || !word_char_->search(text.substr(stop, utf8_len(text[stop])));
      if (!start_ok || !stop_ok) continue;
    }
    if (t.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), done);
    if (t.rstrip) stop += leading_space_len(text.substr(stop));
    if (start < done) start = done;  // a previous rstrip already took these bytes
    if (done < start) out.push_back({done, start, -1});
    out.push_back({start, stop, t.id});
    done = stop;
    pos = std::max(pos, stop);
  }
  if (done < text.size()) out.push_back({done, text.size(), -1});
}

}  // namespace ernie::text
