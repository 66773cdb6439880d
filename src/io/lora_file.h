// LoRA adapter files for the DiT, in the key styles trainers write for ERNIE-Image, told apart by content:
//   diffusers / PEFT   transformer.layers.0.self_attention.to_q.lora_A.weight / lora_B (also under base_model.model.)
//   ai-toolkit, diffusion-pipe   diffusion_model.layers.0.self_attention.to_q.lora_A.weight
//   kohya / musubi-tuner   lora_unet_layers_0_self_attention_to_q.lora_down.weight / .lora_up.weight / .alpha
//   OneTrainer         transformer.layers.0.self_attention.to_q.lora_down.weight / .lora_up.weight / .alpha
//   DiffSynth-Studio   layers.0.self_attention.to_q.lora_A.default.weight
// Each names a DiT linear ("layers.0.self_attention.to_q.weight", or a global one: adaLN_modulation.1,
// time_embedding.*, text_proj, final_*, x_embedder.proj) with down A [rank, in] and up B [out, rank]:
// delta W = scale · (alpha / rank) · B·A, alpha = rank when the file stores none (as diffusers does).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/configs.h"
#include "io/tensor_file.h"

namespace ernie {

// Where one adapted module's tensors are in the file.
struct LoraModule {
  std::string target;        // the DiT weight it changes, as in the checkpoint ("layers.0.mlp.up_proj.weight")
  std::string down, up;      // tensor names in the file: A [rank, in], B [out, rank] (1x1 conv forms allowed)
  std::string alpha;         // a scalar tensor's name; empty: alpha = rank
  int64_t rank = 0;
};

struct LoraLayout {
  std::string style;                  // "diffusers", "ai-toolkit", "kohya", "onetrainer", "diffsynth" (the first seen)
  std::vector<LoraModule> modules;    // sorted by target
  std::vector<std::string> skipped;   // text-encoder modules: listed, not applied (the DiT's adapter only)
};

// Maps a file's tensor list onto the DiT of `cfg`, checking every name and shape. Throws Error naming the file
// (`what`) and the tensor on: LoKr / LoHa / DoRA / LoCon-mid / diff tensors or LoRA biases (not supported), a
// module the DiT does not have, a down without its up (or the reverse), shapes that do not fit the weight,
// ranks that differ between down and up, a non-scalar alpha, a file with no DiT module at all. Exposed for
// the fuzzer: names and shapes only, no data read.
LoraLayout lora_layout(const std::vector<TensorInfo>& tensors, const DitConfig& cfg, const std::string& what);

// One module's factors, as F32 on the host: delta W = (alpha / rank) · up · down.
struct LoraFactors {
  Tensor down, up;  // [rank, in], [out, rank]
  float alpha = 0;
  int64_t rank = 0;
};

struct LoraAdapter {
  std::string path;
  std::string style;
  std::map<std::string, LoraFactors> weights;  // by target DiT weight
  std::vector<std::string> skipped;
};

// Opens `path` (safetensors or GGUF, by content), maps it (lora_layout) and reads every factor, checking that
// each value and alpha is finite and alpha is not negative.
LoraAdapter load_lora(const std::string& path, const DitConfig& cfg);

}  // namespace ernie
