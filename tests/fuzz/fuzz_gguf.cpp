// libFuzzer target: the GGUF parser must reject garbage with an Error, never crash; what it accepts must lie
// inside the input, and its metadata and tensors must read back (block types de-quantized) without faults.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "io/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ernie;
  try {
    const GgufHeader h = parse_gguf(data, size, "fuzz");
    for (const auto& [key, v] : h.metadata) {
      if (v.bytes.data() < reinterpret_cast<const char*>(data) ||
          v.bytes.data() + v.bytes.size() > reinterpret_cast<const char*>(data) + size)
        __builtin_trap();  // a value the parser accepted must lie inside the input
      try {
        if (v.type == GgufType::STRING) (void)v.str(key);
        else if (v.type == GgufType::BOOL) (void)v.boolean(key);
        else if (v.type == GgufType::ARRAY && v.elem == GgufType::STRING) (void)v.strings(key);
        else if (v.type == GgufType::ARRAY) (void)v.numbers(key), (void)v.integers(key);
        else (void)v.number(key), (void)v.integer(key);
      } catch (const Error&) {
      }
    }
    int64_t decoded = 0;
    for (const TensorInfo& t : h.tensors) {
      if (h.data_offset + t.end > size) __builtin_trap();  // a span the parser accepted must lie inside the input
      const int64_t n = shape_numel(t.shape);
      if (decoded + n > (int64_t(1) << 22)) continue;  // bound the work per input
      decoded += n;
      (void)gguf_tensor_copy(h, t, data);
    }
  } catch (const Error&) {
  }
  return 0;
}
