// libFuzzer target: any template text must parse and render to a string or fail with an Error (line and
// column), never crash, hang or exhaust memory. The context has the variables real templates use.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "text/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
                 {"role": "assistant", "content": " ok "}],
    "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": true, "tools": null, "n": 3,
    "l": [1, 2.5, "x", null, true], "d": {"a": {"b": [1]}}})");
  try {
    std::string out = ernie::render_chat_template(std::string(reinterpret_cast<const char*>(data), size), ctx);
    (void)out;
  } catch (const ernie::Error&) {
  }
  return 0;
}
