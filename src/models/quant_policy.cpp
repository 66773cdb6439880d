#include "models/quant_policy.h"

namespace ernie {

bool QuantPolicy::quantized(const std::string& component, const std::string& name, int dit_layers) const {
  if (component != "transformer" && !(quantize_text_encoder && (component == "text_encoder" || component == "pe")))
    return false;
  if (!name.ends_with(".weight")) return false;
  for (const std::string& k : keep)
    if (name.find(k) != std::string::npos) return false;
  if (component == "transformer" && keep_first_last_dit_blocks &&
      (name.rfind("layers.0.", 0) == 0 || name.rfind("layers." + std::to_string(dit_layers - 1) + ".", 0) == 0))
    return false;
  // Only the linear projections: attention and MLP.
  return name.find("self_attention.to_") != std::string::npos || name.find("self_attn.") != std::string::npos ||
         name.find("mlp.") != std::string::npos;
}

DType QuantPolicy::format(const std::string& component, DType dit) const {
  return component != "transformer" && text_models_int8 ? DType::I8 : dit;
}

std::optional<DType> QuantPolicy::text_encoder_quantization(std::optional<DType> dit) const {
  if (!dit || !quantize_text_encoder) return std::nullopt;
  return format("text_encoder", *dit);
}

}  // namespace ernie
