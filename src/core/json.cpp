#include "core/json.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"

namespace ernie {

nlohmann::json read_json_file(const std::string& path) {
  using json = nlohmann::json;
  const std::string text = read_regular_file(path, kMaxJsonFileBytes);
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) {
    try {
      json unused = json::parse(text);
      (void)unused;
    } catch (const json::parse_error& e) {
      fail(path, ": invalid JSON (", e.what(), ")");
    }
    fail(path, ": invalid JSON");
  }
  ERNIE_CHECK(j.is_object(), path, ": expected a JSON object at the top level");
  return j;
}

}  // namespace ernie
