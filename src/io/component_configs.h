// Configs read off a component file's tensor shapes, for component files given without --model (their formats
// hold no config.json). What shapes cannot tell comes from the released ERNIE-Image model's configs.
#pragma once
#include <functional>
#include <string>

#include "io/configs.h"
#include "io/tensor_file.h"

namespace ernie {

// Looks a tensor up by its name in our (diffusers) spelling, without the component prefix; nullptr when absent.
using TensorLookup = std::function<const TensorInfo*(const std::string&)>;

// DiT: hidden, in channels and patch from x_embedder, layers counted, head dim from the QK norm (128 without
// one), FFN from gate_proj, text_in_dim from text_proj (hidden without one), out channels from final_linear.
// rope_axes_dim is the released (32, 48, 48) scaled to the head dim; theta 256, eps 1e-6 as released.
DitConfig infer_dit_config(const TensorLookup& find, const std::string& path);
// Text encoder (Mistral): vocab and hidden from embed_tokens, layers counted, FFN from gate_proj. The head dim is
// not in the weights: 128 (released) when it divides the q and kv widths, else the largest common divisor of both
// up to 128 that leaves at least 4 query heads. RoPE (YaRN), norms and token ids as released.
MistralConfig infer_mistral_config(const TensorLookup& find, const std::string& path);
// VAE: blocks, resnets per block, channels, latent channels, attention, quant convs and patch (from the BatchNorm
// size) from shapes. GroupNorm groups are not in the weights: 32 as released, fewer (a quarter of the first block's
// channels) for blocks narrower than 128.
VaeConfig infer_vae_config(const TensorLookup& find, const std::string& path);
// The released scheduler/scheduler_config.json: FlowMatchEulerDiscreteScheduler, shift 4.0, no dynamic shift.
SchedulerConfig released_scheduler_config();

}  // namespace ernie
