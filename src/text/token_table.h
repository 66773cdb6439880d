// Flat open-addressing hash tables for the tokenizer's hot lookups: token text -> id (the 131k-entry
// vocabulary; texts live in one arena) and token-id pair -> merge. Much faster to build and probe than
// std::unordered_map, which re-hashes strings while walking its buckets.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace ernie::text {

class TokenTable {
 public:
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    if (cap > slots_.size()) rehash(cap);
  }
  // Inserts `key`, or gives an existing key the new id (a repeated key keeps the last id).
  void insert_or_assign(std::string_view key, int64_t id) {
    if (2 * (size_ + 1) > slots_.size()) rehash(slots_.empty() ? 16 : 2 * slots_.size());
    const uint64_t h = hash(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.id < 0) {
        s = {h, uint32_t(arena_.size()), uint32_t(key.size()), id};
        arena_.append(key);
        ++size_;
        return;
      }
      if (s.hash == h && view(s) == key) {
        s.id = id;
        return;
      }
    }
  }
  // The id of `key`, or -1.
  int64_t find(std::string_view key) const {
    if (slots_.empty()) return -1;
    const uint64_t h = hash(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.id < 0) return -1;
      if (s.hash == h && view(s) == key) return s.id;
    }
  }
  size_t size() const { return size_; }
  // Where an entry's text lives in the arena; stays valid when the table is moved.
  struct Ref {
    uint32_t off = 0, len = 0;
  };
  std::string_view text(Ref r) const { return std::string_view(arena_).substr(r.off, r.len); }
  // Calls f(ref, id) for every entry, in no particular order.
  template <class F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_)
      if (s.id >= 0) f(Ref{s.off, s.len}, s.id);
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t off = 0, len = 0;
    int64_t id = -1;  // -1: empty
  };
  static uint64_t hash(std::string_view s) { return std::hash<std::string_view>{}(s); }
  std::string_view view(const Slot& s) const { return std::string_view(arena_).substr(s.off, s.len); }
  void rehash(size_t cap) {
    std::vector<Slot> old(cap);
    old.swap(slots_);
    mask_ = cap - 1;
    for (const Slot& s : old) {
      if (s.id < 0) continue;
      size_t i = s.hash & mask_;
      while (slots_[i].id >= 0) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }
  std::vector<Slot> slots_;
  std::string arena_;
  size_t size_ = 0, mask_ = 0;
};

// (left id, right id) -> (rank, merged id); ids must be below 2^31.
class MergeTable {
 public:
  struct Merge {
    uint32_t rank, new_id;
  };
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    if (cap > slots_.size()) rehash(cap);
  }
  // A repeated pair keeps the last entry, as the HashMap tokenizers builds.
  void insert_or_assign(uint32_t a, uint32_t b, Merge m) {
    if (2 * (size_ + 1) > slots_.size()) rehash(slots_.empty() ? 16 : 2 * slots_.size());
    const uint64_t k = key(a, b);
    for (size_t i = mix(k) & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key == 0) {
        s = {k, m};
        ++size_;
        return;
      }
      if (s.key == k) {
        s.merge = m;
        return;
      }
    }
  }
  const Merge* find(uint32_t a, uint32_t b) const {
    if (slots_.empty()) return nullptr;
    const uint64_t k = key(a, b);
    for (size_t i = mix(k) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == k) return &s.merge;
      if (s.key == 0) return nullptr;
    }
  }
  bool empty() const { return size_ == 0; }

 private:
  struct Slot {
    uint64_t key = 0;  // 0: empty; else (a << 32 | b) + 1
    Merge merge{};
  };
  static uint64_t key(uint32_t a, uint32_t b) { return ((uint64_t(a) << 32) | b) + 1; }
  static uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
  }
  void rehash(size_t cap) {
    std::vector<Slot> old(cap);
    old.swap(slots_);
    mask_ = cap - 1;
    for (const Slot& s : old) {
      if (s.key == 0) continue;
      size_t i = mix(s.key) & mask_;
      while (slots_[i].key != 0) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }
  std::vector<Slot> slots_;
  size_t size_ = 0, mask_ = 0;
};

}  // namespace ernie::text
