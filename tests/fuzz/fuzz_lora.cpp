// libFuzzer target: LoRA files and tags. The first byte picks the parser: odd, the rest is a safetensors file
// whose tensors lora_layout maps onto a small DiT; even, the rest is a prompt for strip_lora_tags (and a --lora
// flag for parse_lora_flag). Garbage is an Error, never a crash; what is accepted is consistent.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "engine/lora_library.h"
#include "io/lora_file.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t* rest = data + 1;
  const size_t n = size - 1;
  try {
    if (data[0] & 1) {
      ernie::DitConfig cfg;  // the tiny test model's shape
      cfg.hidden_size = 64, cfg.num_attention_heads = 4, cfg.num_layers = 2, cfg.ffn_hidden_size = 160;
      cfg.in_channels = cfg.out_channels = 32, cfg.text_in_dim = 48;
      const auto infos = ernie::parse_safetensors_header(rest, n, "fuzz");
      const ernie::LoraLayout l = ernie::lora_layout(infos, cfg, "fuzz");
      if (l.modules.empty()) __builtin_trap();  // "no module" is an error, never an empty layout
      for (const auto& m : l.modules)
        if (m.rank < 1 || m.down.empty() || m.up.empty()) __builtin_trap();
    } else {
      const std::string s(reinterpret_cast<const char*>(rest), n);
      std::vector<ernie::LoraRef> tags;
      const std::string out = ernie::strip_lora_tags(s, &tags);
      if (out.size() > s.size()) __builtin_trap();
      for (const auto& t : tags)
        if (t.name.empty() || !t.from_tag) __builtin_trap();
      if (tags.empty() && out != s) __builtin_trap();  // a prompt without tags is left as it is
      (void)ernie::parse_lora_flag(s);
    }
  } catch (const ernie::Error&) {
  }
  return 0;
}
