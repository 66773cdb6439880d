// Unicode Normalization Form C (canonical decomposition, canonical ordering, canonical composition) for the
// tokenizer's NFC normalizer. Tables come from scripts/gen_nfc_tables.py (Unicode 14.0).
#pragma once
#include <string>
#include <string_view>

namespace ernie::text {

// NFC of valid UTF-8 text.
std::string nfc(std::string_view text);

}  // namespace ernie::text
