// libFuzzer target: the GGUF parser must reject garbage with an Error, never crash; what it accepts must lie
// inside the input, and its metadata and tensors must read back (block types de-quantized) without faults.
// A file that parses also goes through the LLM readers: its config (gguf_mistral_config) and, when it is small,
// the tokenizer rebuilt from tokenizer.ggml.* (encoding and decoding a short text).
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_llm.h"
#include "io/gguf_tokenizer.h"

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
    try {
      (void)gguf_mistral_config(h, "fuzz");
    } catch (const Error&) {
    }
    auto count = [&](const char* key) -> uint64_t {
      auto it = h.metadata.find(key);
      return it == h.metadata.end() ? 0 : it->second.count;
    };
    if (h.metadata.count("tokenizer.ggml.model") && count("tokenizer.ggml.tokens") <= 4096 &&
        count("tokenizer.ggml.merges") <= 4096) {  // bound the work per input
      try {
        const Tokenizer tok = tokenizer_from_gguf_metadata(h.metadata, "fuzz", 64);
        const std::vector<int64_t> ids = tok.encode("a cat [INST] \xe4\xb8\xad </s>\n");
        (void)tok.decode(ids), (void)tok.decode(ids, true);
      } catch (const Error&) {
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
