#include "text/nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "text/unicode.h"

namespace ernie::text {
namespace {

struct CccRange {
  char32_t first, last;
  uint8_t ccc;
};
struct Decomposition {
  char32_t cp;
  uint16_t offset, length;
};
struct Composition {
  char32_t first, second, composite;
};
#include "text/nfc_tables.inc"

// Hangul syllables are (de)composed algorithmically.
constexpr char32_t SBase = 0xAC00, LBase = 0x1100, VBase = 0x1161, TBase = 0x11A7;
constexpr char32_t LCount = 19, VCount = 21, TCount = 28, NCount = VCount * TCount, SCount = LCount * NCount;

uint8_t ccc(char32_t cp) {
  if (cp < 0x300) return 0;
  auto it = std::upper_bound(std::begin(kCcc), std::end(kCcc), cp,
                             [](char32_t c, const CccRange& r) { return c < r.first; });
  if (it == std::begin(kCcc)) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= SBase && cp < SBase + SCount) {
    const char32_t s = cp - SBase;
    out.push_back(LBase + s / NCount);
    out.push_back(VBase + (s % NCount) / TCount);
    if (s % TCount) out.push_back(TBase + s % TCount);
    return;
  }
  auto it = std::lower_bound(std::begin(kDecomp), std::end(kDecomp), cp,
                             [](const Decomposition& d, char32_t c) { return d.cp < c; });
  if (it != std::end(kDecomp) && it->cp == cp) out.insert(out.end(), kDecompChars + it->offset,
                                                          kDecompChars + it->offset + it->length);
  else out.push_back(cp);
}

// The primary composite of (a, b), or 0.
char32_t compose(char32_t a, char32_t b) {
  if (a >= LBase && a < LBase + LCount && b >= VBase && b < VBase + VCount)
    return SBase + ((a - LBase) * VCount + (b - VBase)) * TCount;
  if (a >= SBase && a < SBase + SCount && (a - SBase) % TCount == 0 && b > TBase && b < TBase + TCount)
    return a + (b - TBase);
  auto it = std::lower_bound(std::begin(kComp), std::end(kComp), std::pair{a, b},
                             [](const Composition& c, std::pair<char32_t, char32_t> k) {
                               return c.first != k.first ? c.first < k.first : c.second < k.second;
                             });
  return it != std::end(kComp) && it->first == a && it->second == b ? it->composite : 0;
}

}  // namespace

std::string nfc(std::string_view text) {
  // Below U+0300 every character is its own NFC and starts no composition: the common case.
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0xCC; }))
    return std::string(text);
  std::vector<char32_t> cps;
  cps.reserve(text.size());
  for (size_t i = 0; i < text.size();) decompose(next_code_point(text, i), cps);
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < cps.size();) {
    if (ccc(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && ccc(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + i, cps.begin() + j, [](char32_t a, char32_t b) { return ccc(a) < ccc(b); });
    i = j;
  }
  // Canonical composition.
  std::vector<char32_t> out;
  out.reserve(cps.size());
  size_t starter = SIZE_MAX;  // index in `out` of the last starter
  int last_ccc = -1;          // class of the last character appended after the starter
  for (char32_t c : cps) {
    const int cc = ccc(c);
    if (starter != SIZE_MAX) {
      // Not blocked: nothing between the starter and c, or the last one has a lower class than c.
      const bool adjacent = starter + 1 == out.size();
      if (adjacent || (last_ccc != 0 && last_ccc < cc)) {
        if (char32_t comp = compose(out[starter], c)) {
          out[starter] = comp;
          continue;
        }
      }
    }
    out.push_back(c);
    if (cc == 0) {
      starter = out.size() - 1;
      last_ccc = -1;
    } else {
      last_ccc = cc;
    }
  }
  std::string s;
  s.reserve(text.size());
  for (char32_t c : out) append_utf8(s, c);
  return s;
}

}  // namespace ernie::text
