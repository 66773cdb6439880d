// libFuzzer target: the model folder's config parsers (io/configs.h) on arbitrary JSON: each input is parsed as
// every component's config; an Error or a validated config, never a crash.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/configs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return 0;
  auto guarded = [&](auto&& parse) {
    try {
      parse();
    } catch (const ernie::Error&) {
    }
  };
  guarded([&] {
    const ernie::DitConfig c = ernie::parse_dit_config(j, "fuzz");
    if (c.hidden_size % c.num_attention_heads != 0 || c.eps <= 0 || c.eps >= 1) __builtin_trap();
  });
  guarded([&] { ernie::parse_mistral_config(j, "fuzz"); });
  guarded([&] {
    const ernie::VaeConfig c = ernie::parse_vae_config(j, "fuzz");
    if (c.block_out_channels.empty() || c.block_out_channels.size() > 8) __builtin_trap();
  });
  guarded([&] { ernie::parse_scheduler_config(j, "fuzz"); });
  return 0;
}
