#include "text/pe_prompt.h"

#include "core/error.h"
#include "text/py_str.h"

namespace ernie {

static void check_utf8(const std::string& s, const char* what) {
  size_t bad = 0;
  if (!py::utf8_valid(s, &bad)) fail(what, " is not valid UTF-8 (bad byte at offset ", std::to_string(bad), ")");
}

std::string pe_user_content(const std::string& prompt, int width, int height) {
  check_utf8(prompt, "prompt");
  ERNIE_CHECK(width > 0 && height > 0, "prompt enhancer: width and height must be positive, got ",
              std::to_string(width), "x", std::to_string(height));
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  j["prompt"] = prompt;
  j["width"] = width;
  j["height"] = height;
  return py::json_dumps(j);
}

nlohmann::ordered_json pe_messages(const std::string& prompt, int width, int height,
                                   const std::optional<std::string>& system_prompt) {
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  if (system_prompt) {
    check_utf8(*system_prompt, "system prompt");
    msgs.push_back({{"role", "system"}, {"content", *system_prompt}});
  }
  msgs.push_back({{"role", "user"}, {"content", pe_user_content(prompt, width, height)}});
  return msgs;
}

}  // namespace ernie
