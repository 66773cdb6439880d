// UTF-8 and byte-level helpers for the tokenizer: validation, code point iteration, lossy decoding with
// String::from_utf8_lossy semantics, Unicode White_Space, and GPT-2's bytes_to_unicode alphabet.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ernie::text {

// Byte offset of the first byte that does not start a valid UTF-8 sequence (overlongs, surrogates and
// values above U+10FFFF are invalid), or std::string_view::npos when the whole text is valid.
size_t utf8_invalid_at(std::string_view s);
inline bool is_valid_utf8(std::string_view s) { return utf8_invalid_at(s) == std::string_view::npos; }

// Length in bytes of the sequence starting with `lead` (1 for ASCII and for any byte that cannot lead).
inline size_t utf8_len(unsigned char lead) {
  return lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

// Decodes the code point at s[i] of a *valid* UTF-8 string and advances i past it.
char32_t next_code_point(std::string_view s, size_t& i);
void append_utf8(std::string& out, char32_t cp);

// Bytes to text where every maximal invalid subsequence becomes one U+FFFD (Rust String::from_utf8_lossy,
// which HuggingFace tokenizers' ByteLevel decoder uses).
std::string utf8_lossy(std::string_view bytes);

// Unicode White_Space (Rust char::is_whitespace, Oniguruma \s).
bool is_white_space(char32_t cp);

// GPT-2 bytes_to_unicode: byte b is shown as the code point byte_to_code_point(b); the inverse returns -1 for
// code points outside the 256-entry alphabet.
char32_t byte_to_code_point(uint8_t b);
int code_point_to_byte(char32_t cp);

}  // namespace ernie::text
