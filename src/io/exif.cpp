#include "io/exif.h"

#include <cstring>

namespace ernie {
namespace {

constexpr uint16_t kExifIfdPointer = 0x8769, kUserComment = 0x9286;
constexpr char kUnicode[8] = {'U', 'N', 'I', 'C', 'O', 'D', 'E', 0};

// UTF-8 -> code points; invalid sequences become U+FFFD.
std::vector<uint32_t> code_points(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = uint8_t(s[i]);
    const size_t n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : 4;  // 4: no lead
    uint32_t cp = n == 0 ? c : c & (0x3fu >> n);
    bool ok = n < 4 && i + n < s.size();
    for (size_t k = 1; ok && k <= n; ++k) {
      const auto t = uint8_t(s[i + k]);
      ok = (t >> 6) == 2;
      cp = cp << 6 | (t & 0x3f);
    }
    ok = ok && cp <= 0x10ffff && !(cp >= 0xd800 && cp < 0xe000);
    out.push_back(ok ? cp : 0xfffd);
    i += ok ? n + 1 : 1;
  }
  return out;
}

void put_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xc0 | cp >> 6);
    out += char(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += char(0xe0 | cp >> 12);
    out += char(0x80 | (cp >> 6 & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  } else {
    out += char(0xf0 | cp >> 18);
    out += char(0x80 | (cp >> 12 & 0x3f));
    out += char(0x80 | (cp >> 6 & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  }
}

std::string utf16_to_utf8(const uint8_t* p, size_t n, bool big_endian) {
  std::string out;
  auto unit = [&](size_t i) { return big_endian ? uint32_t(p[i] << 8 | p[i + 1]) : uint32_t(p[i + 1] << 8 | p[i]); };
  for (size_t i = 0; i + 1 < n; i += 2) {
    uint32_t u = unit(i);
    if (u >= 0xd800 && u < 0xdc00 && i + 3 < n && unit(i + 2) >= 0xdc00 && unit(i + 2) < 0xe000) {
      u = 0x10000 + ((u - 0xd800) << 10) + (unit(i + 2) - 0xdc00);
      i += 2;
    } else if (u >= 0xd800 && u < 0xe000) {
      u = 0xfffd;
    }
    put_utf8(out, u);
  }
  return out;
}

struct Reader {
  const uint8_t* d;
  size_t n;
  bool be;
  bool has(size_t at, size_t len) const { return at <= n && len <= n - at; }
  uint32_t u16(size_t at) const { return be ? uint32_t(d[at] << 8 | d[at + 1]) : uint32_t(d[at + 1] << 8 | d[at]); }
  uint32_t u32(size_t at) const {
    return be ? uint32_t(d[at]) << 24 | uint32_t(d[at + 1]) << 16 | uint32_t(d[at + 2]) << 8 | d[at + 3]
              : uint32_t(d[at + 3]) << 24 | uint32_t(d[at + 2]) << 16 | uint32_t(d[at + 1]) << 8 | d[at];
  }
  // The entry `tag` of the IFD at `ifd`: the offset of its 12 bytes, or 0.
  size_t find(size_t ifd, uint16_t tag) const {
    if (!has(ifd, 2)) return 0;
    const uint32_t count = u16(ifd);
    for (uint32_t k = 0; k < count; ++k) {
      const size_t e = ifd + 2 + size_t(k) * 12;
      if (!has(e, 12)) return 0;
      if (u16(e) == tag) return e;
    }
    return 0;
  }
};

void put16(std::vector<uint8_t>& b, uint32_t v) {
  b.push_back(uint8_t(v >> 8));
  b.push_back(uint8_t(v));
}
void put32(std::vector<uint8_t>& b, uint32_t v) {
  put16(b, v >> 16);
  put16(b, v & 0xffff);
}

}  // namespace

std::vector<uint8_t> exif_with_user_comment(const std::string& utf8) {
  std::vector<uint8_t> comment(kUnicode, kUnicode + 8);
  for (uint32_t cp : code_points(utf8)) {
    if (cp >= 0x10000) {
      put16(comment, 0xd800 + ((cp - 0x10000) >> 10));
      put16(comment, 0xdc00 + ((cp - 0x10000) & 0x3ff));
    } else {
      put16(comment, cp);
    }
  }
  std::vector<uint8_t> b = {'M', 'M', 0, 42};
  put32(b, 8);
  put16(b, 1);  // IFD0 at 8: the Exif IFD pointer only
  put16(b, kExifIfdPointer);
  put16(b, 4);  // LONG
  put32(b, 1);
  put32(b, 26);
  put32(b, 0);
  put16(b, 1);  // the Exif IFD at 26: UserComment, UNDEFINED, its bytes at 44
  put16(b, kUserComment);
  put16(b, 7);
  put32(b, uint32_t(comment.size()));
  put32(b, 44);
  put32(b, 0);
  b.insert(b.end(), comment.begin(), comment.end());
  return b;
}

std::optional<std::string> exif_user_comment(const uint8_t* data, size_t size) {
  if (size >= 6 && std::memcmp(data, "Exif\0\0", 6) == 0) {
    data += 6;
    size -= 6;
  }
  if (size < 8 || !((data[0] == 'M' && data[1] == 'M') || (data[0] == 'I' && data[1] == 'I'))) return std::nullopt;
  const Reader r{data, size, data[0] == 'M'};
  if (r.u16(2) != 42) return std::nullopt;
  const size_t ptr = r.find(r.u32(4), kExifIfdPointer);
  if (ptr == 0) return std::nullopt;
  const size_t e = r.find(r.u32(ptr + 8), kUserComment);
  if (e == 0) return std::nullopt;
  const size_t len = r.u32(e + 4);
  const size_t at = len <= 4 ? e + 8 : r.u32(e + 8);
  if (len < 8 || !r.has(at, len)) return std::nullopt;
  const uint8_t* c = data + at;
  if (std::memcmp(c, kUnicode, 8) == 0) {
    // piexif writes UTF-16 big-endian whatever the TIFF order; a byte-order mark, when present, decides
    const uint8_t* t = c + 8;
    size_t n = len - 8;
    bool be = true;
    if (n >= 2 && ((t[0] == 0xff && t[1] == 0xfe) || (t[0] == 0xfe && t[1] == 0xff))) {
      be = t[0] == 0xfe;
      t += 2;
      n -= 2;
    }
    return utf16_to_utf8(t, n, be);
  }
  std::string s(reinterpret_cast<const char*>(c + 8), len - 8);  // ASCII, or undefined (taken as UTF-8)
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

}  // namespace ernie
