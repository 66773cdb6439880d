#include "text/unicode.h"

#include <array>

namespace ernie::text {
namespace {

// Length of the valid sequence at s[i], or 0 with *bad set to the length of the maximal invalid prefix
// (the number of bytes Rust's Utf8Chunks reports as one error: at least 1).
size_t valid_sequence_at(std::string_view s, size_t i, size_t* bad) {
  auto b = [&](size_t k) -> unsigned { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0x100u; };
  const unsigned c0 = b(0);
  if (c0 < 0x80) return 1;
  unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  size_t need;
  if (c0 >= 0xC2 && c0 <= 0xDF) need = 2;
  else if (c0 == 0xE0) need = 3, lo = 0xA0;
  else if (c0 >= 0xE1 && c0 <= 0xEC) need = 3;
  else if (c0 == 0xED) need = 3, hi = 0x9F;
  else if (c0 >= 0xEE && c0 <= 0xEF) need = 3;
  else if (c0 == 0xF0) need = 4, lo = 0x90;
  else if (c0 >= 0xF1 && c0 <= 0xF3) need = 4;
  else if (c0 == 0xF4) need = 4, hi = 0x8F;
  else {
    *bad = 1;
    return 0;
  }
  for (size_t k = 1; k < need; ++k) {
    const unsigned c = b(k);
    const unsigned l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (c < l || c > h) {  // also true past the end (0x100)
      *bad = k;
      return 0;
    }
  }
  return need;
}

constexpr bool byte_is_printable(unsigned b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

constexpr std::array<char32_t, 256> make_byte_table() {
  std::array<char32_t, 256> t{};
  unsigned n = 0;
  for (unsigned b = 0; b < 256; ++b) t[b] = byte_is_printable(b) ? b : 256 + n++;
  return t;
}
constexpr std::array<char32_t, 256> kByteToCp = make_byte_table();

constexpr std::array<int16_t, 68> make_extra_table() {
  std::array<int16_t, 68> t{};
  for (unsigned b = 0; b < 256; ++b)
    if (!byte_is_printable(b)) t[kByteToCp[b] - 256] = static_cast<int16_t>(b);
  return t;
}
constexpr std::array<int16_t, 68> kExtraToByte = make_extra_table();

}  // namespace

size_t utf8_invalid_at(std::string_view s) {
  size_t i = 0, bad = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t n = valid_sequence_at(s, i, &bad);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

char32_t next_code_point(std::string_view s, size_t& i) {
  const unsigned char c0 = static_cast<unsigned char>(s[i]);
  size_t n = utf8_len(c0);
  char32_t cp = n == 1 ? c0 : n == 2 ? (c0 & 0x1F) : n == 3 ? (c0 & 0x0F) : (c0 & 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0, bad = 0;
  while (i < s.size()) {
    size_t n = valid_sequence_at(s, i, &bad);
    if (n) {
      out.append(s.data() + i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += bad;
    }
  }
  return out;
}

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

char32_t byte_to_code_point(uint8_t b) { return kByteToCp[b]; }

int code_point_to_byte(char32_t cp) {
  if (cp < 256) return byte_is_printable(cp) ? static_cast<int>(cp) : -1;
  if (cp < 256 + kExtraToByte.size()) return kExtraToByte[cp - 256];
  return -1;
}

}  // namespace ernie::text
