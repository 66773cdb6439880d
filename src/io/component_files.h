// Component files given on their own (--diffusion-model, --text-encoder, --vae, --tokenizer): each replaces that
// component of --model, and with all four --model may be left out.
#pragma once
#include <string>
#include <vector>

namespace ernie {

// Formats are told by content, never by name (io/key_layouts.h, ModelFolder::open):
// - the DiT as safetensors or GGUF (io/gguf.h), its names bare (diffusers, Comfy-Org's diffusion_models files,
//   GGUF DiTs) or under ComfyUI's "model.diffusion_model.";
// - the text encoder with the HF causal-LM names under "model." (Comfy-Org's text_encoders files; an lm_head and a
//   tekken_model tensor are ignored), the diffusers text_encoder's "language_model.model." / "model.language_model.",
//   or a llama.cpp LLM GGUF (io/gguf_llm.h);
// - the VAE in the diffusers AutoencoderKLFlux2 layout or the original BFL/LDM one (Comfy-Org's vae files);
// - the tokenizer as a tokenizer.json file (a tokenizer_config.json beside it is read too), or a llama.cpp GGUF's
//   (io/gguf_tokenizer.h), which a GGUF text encoder gives when no --model and no --tokenizer is given.
struct ComponentFiles {
  std::string diffusion_model, text_encoder, vae, tokenizer;
  bool any() const { return !diffusion_model.empty() || !text_encoder.empty() || !vae.empty() || !tokenizer.empty(); }
  // The flags still missing for a model without --model ("--vae", ...); empty when complete.
  std::vector<std::string> missing() const {
    std::vector<std::string> m;
    if (diffusion_model.empty()) m.push_back("--diffusion-model");
    if (text_encoder.empty()) m.push_back("--text-encoder");
    if (vae.empty()) m.push_back("--vae");
    if (tokenizer.empty()) m.push_back("--tokenizer");
    return m;
  }
  bool complete() const { return missing().empty(); }
};

}  // namespace ernie
