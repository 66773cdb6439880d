// libFuzzer target: the tokenizer.json loader must reject garbage with an Error, never crash or hang; a file
// it accepts must encode and decode a sample text without crashing.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  // An optional tokenizer_config.json after a NUL byte.
  std::string_view config;
  if (size_t nul = in.find('\0'); nul != std::string_view::npos) {
    config = in.substr(nul + 1);
    in = in.substr(0, nul);
  }
  try {
    ernie::Tokenizer tok = ernie::Tokenizer::from_json(in, config, "fuzz");
    for (const char* text : {"a cat", "", " 一只猫\r\n  [INST]</s>\t1989年 🐱", "e\xCC\x81"}) {
      auto ids = tok.encode(text);
      (void)tok.decode(ids, false);
      (void)tok.decode(ids, true);
    }
  } catch (const ernie::Error&) {
  }
  return 0;
}
