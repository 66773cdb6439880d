// Small GGUF files built byte by byte for the hostile-input tests: each field can be set to a lie.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ernie::test {

struct GgufTensorSpec {
  std::string name;
  std::vector<uint64_t> ne;          // ggml order: ne[0] innermost
  uint32_t type = 0;                 // GGML type id
  uint64_t offset = 0;               // within the data section
  std::optional<uint32_t> n_dims;    // default ne.size()
};

struct GgufSpec {
  std::string magic = "GGUF";
  uint32_t version = 3;
  std::optional<uint64_t> n_tensors, n_kv;  // default: the real counts
  std::vector<std::pair<std::string, std::string>> strings = {{"general.architecture", "test"}};
  std::optional<uint32_t> alignment;  // written as general.alignment (u32) when set
  std::vector<GgufTensorSpec> tensors;
  size_t data_bytes = 0;  // bytes of data section written after the padding
};

class GgufBytes {
 public:
  std::string b;
  void u32(uint32_t v) { for (int i = 0; i < 4; ++i) b.push_back(char(uint8_t(v >> (8 * i)))); }
  void u64(uint64_t v) { for (int i = 0; i < 8; ++i) b.push_back(char(uint8_t(v >> (8 * i)))); }
  void str(const std::string& s) { u64(s.size()); b += s; }
};

// The file's bytes; the data section holds the byte values 0, 1, 2, ... (mod 251).
inline std::string build_gguf(const GgufSpec& s) {
  GgufBytes o;
  o.b += s.magic;
  o.u32(s.version);
  o.u64(s.n_tensors.value_or(s.tensors.size()));
  o.u64(s.n_kv.value_or(s.strings.size() + (s.alignment ? 1 : 0)));
  for (const auto& [k, v] : s.strings) {
    o.str(k);
    o.u32(8);
    o.str(v);
  }
  if (s.alignment) {
    o.str("general.alignment");
    o.u32(4);
    o.u32(*s.alignment);
  }
  for (const GgufTensorSpec& t : s.tensors) {
    o.str(t.name);
    o.u32(t.n_dims.value_or(uint32_t(t.ne.size())));
    for (uint64_t n : t.ne) o.u64(n);
    o.u32(t.type);
    o.u64(t.offset);
  }
  const size_t align = s.alignment && *s.alignment ? *s.alignment : 32;
  while (o.b.size() % align) o.b.push_back('\0');
  for (size_t i = 0; i < s.data_bytes; ++i) o.b.push_back(char(uint8_t(i % 251)));
  return o.b;
}

// A small valid file: "a" F32 [2, 4], "b" Q8_0 [1, 32] (34 bytes at offset 32).
inline GgufSpec small_gguf() {
  GgufSpec s;
  s.tensors = {{"a", {4, 2}, 0, 0, std::nullopt}, {"b", {32, 1}, 8, 32, std::nullopt}};
  s.data_bytes = 66;
  return s;
}

}  // namespace ernie::test
