// Tensor-name layouts of component files written by other tools, mapped onto the names our tensor specs use
// (the diffusers ones). One small explicit function per layout; the facts are in key_layouts.cpp.
#pragma once
#include <string>

namespace ernie {

// The VAE: diffusers' AutoencoderKLFlux2, or the original BFL/LDM autoencoder layout ("encoder.down.0.block.0...",
// which ComfyUI also accepts).
enum class VaeLayout { Diffusers, Ldm };
const char* vae_layout_name(VaeLayout l);  // "diffusers", "ldm"

// The LDM name of a diffusers AutoencoderKLFlux2 tensor name, for a VAE of `num_blocks` blocks
// ("decoder.up_blocks.0.resnets.1.conv1.weight" -> "decoder.up.1.block.1.conv1.weight" with 2 blocks). `bfl_quant`
// puts quant_conv / post_quant_conv inside the encoder / decoder ("encoder.quant_conv.weight"), as BFL's files have
// them; without it they stay at the top level. Names with no other spelling come back unchanged.
std::string ldm_vae_name(const std::string& diffusers_name, int num_blocks, bool bfl_quant);

// The mid-block attention projections, Linear [C, C] in diffusers and 1x1 convolutions [C, C, 1, 1] in LDM.
bool vae_attention_weight(const std::string& diffusers_name);

}  // namespace ernie
