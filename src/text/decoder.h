// tokenizer.json "decoder": ByteLevel (or a Sequence of ByteLevel), or none (tokens joined by spaces, as
// tokenizers does). Any other decoder is rejected at load with a clear "unsupported" error.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ernie::text {

class Decoder {
 public:
  Decoder() = default;
  static Decoder from_json(const nlohmann::json& j, const std::string& where);

  // Token strings to text. ByteLevel maps each token's characters back to bytes (a token with a character
  // outside the byte alphabet keeps its UTF-8 bytes), then invalid UTF-8 becomes U+FFFD.
  std::string decode(const std::vector<std::string_view>& tokens) const;

 private:
  void add(const nlohmann::json& j, const std::string& where);
  bool byte_level_ = false;
};

}  // namespace ernie::text
