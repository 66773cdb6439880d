// Which weights run in 8 bits: the policy `convert --dtype fp8|int8` stores and `--quantize` applies at load.
// It names the models' modules, and the model loaders (ErnieDit::load, TextEncoder::load) apply it.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace ernie {

// Which tensors are quantized (by convert, and by --quantize at load). A tensor is quantized when it is a
// 2-D linear weight of the DiT or the text encoder / prompt enhancer, its name matches none of `keep`, and
// it is not in the first or last DiT block (those, the time embedding, AdaLN modulation, text projection,
// patch embedding and final layer are known to break under naive 8-bit, see competitors.md
// "convert_to_quant #32").
struct QuantPolicy {
  std::vector<std::string> keep = {"time_embedding.", "adaLN_modulation.", "text_proj.", "x_embedder.",
                                   "final_norm.", "final_linear.", "embed_tokens.", "lm_head."};
  bool keep_first_last_dit_blocks = true;
  bool quantize_text_encoder = true;  // the text encoder's and the prompt enhancer's projections
  // Their 8-bit format is int8 whatever the DiT's: they run weight-only (expanded to bf16 as they run or at
  // load), so fp8's speed is of no use to them, and on random full-size weights an fp8 (3-bit mantissa) text
  // encoder strays ~4x further from bf16 than an int8 one (bench/BENCHMARKS.md, eighth session).
  bool text_models_int8 = true;
  // True when `component`/`name` (a weight name without the component prefix) is quantized.
  bool quantized(const std::string& component, const std::string& name, int dit_layers) const;
  // The 8-bit format of `component`'s quantized weights when the DiT's is `dit` (I8 or F8_E4M3).
  DType format(const std::string& component, DType dit) const;
  // The text encoder's 8-bit dtype under --quantize `dit` (none: not quantized).
  std::optional<DType> text_encoder_quantization(std::optional<DType> dit) const;
};

}  // namespace ernie
