#include "text/normalizer.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "text/nfc.h"

namespace ernie::text {

Normalizer Normalizer::from_json(const nlohmann::json& j, const std::string& where) {
  Normalizer n;
  if (!j.is_null()) n.add(j, where);
  return n;
}

void Normalizer::add(const nlohmann::json& j, const std::string& where) {
  ERNIE_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), where,
              ": normalizer must be an object with a string \"type\"");
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    ERNIE_CHECK(j.contains("normalizers") && j["normalizers"].is_array(), where,
                ": normalizer Sequence needs a \"normalizers\" array");
    for (const auto& s : j["normalizers"]) add(s, where);
  } else if (type == "NFC") {
    steps_.push_back(Step::NFC);
  } else {
    fail(where, ": normalizer type \"", type, "\" is not supported (supported: NFC, Sequence)");
  }
}

std::string Normalizer::apply(std::string_view text) const {
  std::string s(text);
  for (Step st : steps_) {
    switch (st) {
      case Step::NFC:
        s = nfc(s);
        break;
    }
  }
  return s;
}

}  // namespace ernie::text
