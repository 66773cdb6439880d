// Component files given on their own (--diffusion-model, ...): each replaces that component of --model.
#pragma once
#include <string>

namespace ernie {

// Formats are told by content, never by name: the DiT as safetensors or GGUF (io/gguf.h), its names bare (as
// diffusers and Comfy-Org's diffusion_models files have them) or under ComfyUI's "model.diffusion_model.".
struct ComponentFiles {
  std::string diffusion_model;
  bool any() const { return !diffusion_model.empty(); }
};

}  // namespace ernie
