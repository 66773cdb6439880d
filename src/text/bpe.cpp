#include "text/bpe.h"

#include <queue>

#include "core/error.h"
#include "text/unicode.h"

namespace ernie::text {
namespace {
constexpr int64_t kMaxId = 1 << 24;  // ids above this are treated as a malformed file

std::string byte_token(unsigned b) {  // "<0x0A>", as tokenizers' format!("<{:#04X}>", b)
  static const char* hex = "0123456789ABCDEF";
  return std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
}
}  // namespace

Bpe::Bpe(TokenTable vocab, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions opt,
         const std::string& where)
    : vocab_(std::move(vocab)), opt_(std::move(opt)) {
  int64_t max_id = -1;
  vocab_.for_each([&](TokenTable::Ref r, int64_t id) {
    ERNIE_CHECK(id < kMaxId, where, ": model.vocab id ", std::to_string(id), " of token \"",
                std::string(vocab_.text(r)), "\" is out of range [0, ", std::to_string(kMaxId), ")");
    max_id = std::max(max_id, id);
  });
  id_to_token_.assign(size_t(max_id + 1), TokenTable::Ref{UINT32_MAX, 0});
  vocab_.for_each([&](TokenTable::Ref r, int64_t id) { id_to_token_[size_t(id)] = r; });

  merges_.reserve(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string &a = merges[rank].first, &b = merges[rank].second;
    const int64_t ia = vocab_.find(a), ib = vocab_.find(b);
    auto missing = [&](const std::string& t) {
      fail(where, ": merge ", std::to_string(rank), " (\"", a, "\" \"", b, "\") names token \"", t,
           "\", which is not in model.vocab");
    };
    if (ia < 0) missing(a);
    if (ib < 0) missing(b);
    const std::string& pre = opt_.continuing_subword_prefix;
    joined.assign(a);
    if (!pre.empty() && b.compare(0, pre.size(), pre) == 0) joined.append(b, pre.size());
    else joined.append(b);
    const int64_t inew = vocab_.find(joined);
    if (inew < 0) missing(joined);
    merges_.insert_or_assign(uint32_t(ia), uint32_t(ib), {uint32_t(rank), uint32_t(inew)});
  }
  if (opt_.unk_token) {
    if (int64_t id = vocab_.find(*opt_.unk_token); id >= 0) unk_id_ = id;
  }
  if (opt_.byte_fallback) {
    byte_fallback_ids_.assign(256, -1);
    for (unsigned b = 0; b < 256; ++b) byte_fallback_ids_[b] = vocab_.find(byte_token(b));
  }
}

std::optional<int64_t> Bpe::token_to_id(std::string_view token) const {
  int64_t id = vocab_.find(token);
  if (id < 0) return std::nullopt;
  return id;
}

std::optional<std::string_view> Bpe::id_to_token(int64_t id) const {
  if (id < 0 || size_t(id) >= id_to_token_.size() || id_to_token_[size_t(id)].off == UINT32_MAX) return std::nullopt;
  return vocab_.text(id_to_token_[size_t(id)]);
}

void Bpe::tokenize(std::string_view piece, std::vector<int64_t>& out) const {
  if (piece.empty()) return;
  if (opt_.ignore_merges) {
    if (int64_t id = vocab_.find(piece); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<uint32_t> ids;
  ids.reserve(piece.size());
  bool unk_pending = false;
  auto need_unk = [&]() -> uint32_t {
    if (!unk_id_) fail("tokenizer: unk_token \"", *opt_.unk_token, "\" is not in the vocabulary");
    return uint32_t(*unk_id_);
  };
  for (size_t i = 0; i < piece.size();) {
    size_t n = std::min(utf8_len(static_cast<unsigned char>(piece[i])), piece.size() - i);
    std::string_view ch = piece.substr(i, n);
    const bool first = i == 0;
    i += n;
    const bool affixed = (!first && !opt_.continuing_subword_prefix.empty()) ||
                         (i == piece.size() && !opt_.end_of_word_suffix.empty());
    std::string buf;
    if (affixed) {
      buf = (first ? "" : opt_.continuing_subword_prefix) + std::string(ch) +
            (i == piece.size() ? opt_.end_of_word_suffix : "");
      ch = buf;
    }
    if (int64_t id = vocab_.find(ch); id >= 0) {
      if (unk_pending) ids.push_back(need_unk()), unk_pending = false;
      ids.push_back(uint32_t(id));
      continue;
    }
    if (opt_.byte_fallback) {
      bool all = true;
      for (char c : ch) all = all && byte_fallback_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        // tokenizers adds the byte tokens without flushing a pending unk first.
        for (char c : ch) ids.push_back(uint32_t(byte_fallback_ids_[static_cast<unsigned char>(c)]));
        continue;
      }
    }
    if (opt_.unk_token) {
      if (unk_pending && !opt_.fuse_unk) ids.push_back(need_unk());
      unk_pending = true;
    }
    // Without an unk_token, a character that is not in the vocabulary is dropped (as in tokenizers).
  }
  if (unk_pending) ids.push_back(need_unk());
  merge_word(ids);
  for (uint32_t id : ids) out.push_back(id);
}

// Repeatedly merges the adjacent pair of lowest rank (leftmost on ties), as tokenizers' Word::merge_all.
void Bpe::merge_word(std::vector<uint32_t>& ids) const {
  const size_t n = ids.size();
  if (n < 2 || merges_.empty()) return;
  std::vector<int32_t> prev(n), next(n);
  std::vector<uint8_t> alive(n, 1);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = int32_t(i) - 1;
    next[i] = i + 1 < n ? int32_t(i + 1) : -1;
  }
  struct Cand {
    uint32_t rank, pos, new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> q;
  for (size_t i = 0; i + 1 < n; ++i)
    if (const MergeTable::Merge* m = merges_.find(ids[i], ids[i + 1])) q.push({m->rank, uint32_t(i), m->new_id});
  while (!q.empty()) {
    Cand c = q.top();
    q.pop();
    if (!alive[c.pos] || next[c.pos] < 0) continue;
    const int32_t r = next[c.pos];
    const MergeTable::Merge* m = merges_.find(ids[c.pos], ids[size_t(r)]);
    if (!m || m->new_id != c.new_id) continue;  // stale entry
    ids[c.pos] = c.new_id;
    alive[size_t(r)] = 0;
    next[c.pos] = next[size_t(r)];
    if (next[c.pos] >= 0) prev[size_t(next[c.pos])] = int32_t(c.pos);
    if (prev[c.pos] >= 0) {
      const uint32_t p = uint32_t(prev[c.pos]);
      if (const MergeTable::Merge* pm = merges_.find(ids[p], ids[c.pos])) q.push({pm->rank, p, pm->new_id});
    }
    if (next[c.pos] >= 0) {
      if (const MergeTable::Merge* nm = merges_.find(ids[c.pos], ids[size_t(next[c.pos])])) q.push({nm->rank, c.pos, nm->new_id});
    }
  }
  size_t w = 0;
  for (size_t i = 0; i < n; ++i)
    if (alive[i]) ids[w++] = ids[i];
  ids.resize(w);
}

}  // namespace ernie::text
