// libFuzzer target: the safetensors header parser must reject garbage with an Error, never crash.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto infos = ernie::parse_safetensors_header(data, size, "fuzz");
    for (auto& t : infos)
      if (t.end > size) __builtin_trap();  // a span the parser accepted must lie inside the input
  } catch (const ernie::Error&) {
  }
  return 0;
}
