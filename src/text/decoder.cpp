#include "text/decoder.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "text/unicode.h"

namespace ernie::text {

Decoder Decoder::from_json(const nlohmann::json& j, const std::string& where) {
  Decoder d;
  if (!j.is_null()) d.add(j, where);
  return d;
}

void Decoder::add(const nlohmann::json& j, const std::string& where) {
  ERNIE_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), where,
              ": decoder must be an object with a string \"type\"");
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel") {
    ERNIE_CHECK(!byte_level_, where, ": decoder ByteLevel twice in a Sequence is not supported");
    byte_level_ = true;
  } else if (type == "Sequence") {
    ERNIE_CHECK(j.contains("decoders") && j["decoders"].is_array(), where, ": decoder Sequence needs a \"decoders\" array");
    for (const auto& d : j["decoders"]) add(d, where);
  } else {
    fail(where, ": decoder type \"", type, "\" is not supported (supported: ByteLevel)");
  }
}

std::string Decoder::decode(const std::vector<std::string_view>& tokens) const {
  if (!byte_level_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  std::string bytes;
  for (std::string_view t : tokens) {
    const size_t mark = bytes.size();
    bool all = true;
    for (size_t i = 0; i < t.size() && all;) {
      int b = code_point_to_byte(next_code_point(t, i));
      if (b < 0) all = false;
      else bytes += static_cast<char>(b);
    }
    if (!all) {
      bytes.resize(mark);
      bytes += t;
    }
  }
  return utf8_lossy(bytes);
}

}  // namespace ernie::text
