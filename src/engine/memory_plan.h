// The one place memory is planned: device memory of a generation under each low-VRAM mode, from the
// model's configs, and the least offloading that fits a budget (--max-vram, doctor, Engine::open). Estimates count what the engine allocates (weights
// as placed, the largest activations of each phase, with the allocator's size-class rounding); the CUDA
// context and library workspaces come on top (kRuntimeOverheadBytes, for comparisons with free memory).
#pragma once
#include <map>
#include <cstddef>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "core/tensor.h"
#include "engine/options.h"
#include "engine/request.h"
#include "io/configs.h"

namespace ernie {

inline constexpr size_t kRuntimeOverheadBytes = size_t(3) << 29;  // CUDA context + cuBLASLt/cuDNN, ~1.5 GiB

class ModelFolder;

struct ModelShapes {
  DitConfig dit;
  MistralConfig text_encoder;
  VaeConfig vae;
  std::optional<MistralConfig> pe;  // set when the prompt enhancer is used
};

struct GenerationShape {
  int width = 1024, height = 1024;
  int rows = 2;             // DiT batch rows: images x (2 with cfg > 1)
  int text_tokens = 256;    // longest prompt in tokens
  DType act = DType::BF16;
  std::optional<DType> quantize;  // --quantize or a converted 8-bit file: the DiT's linear weights in 8 bits
  bool text_encoder_8bit = false;  // --quantize or an 8-bit file: the text encoder's projections are 8-bit
  bool vae_tiling = false;  // decode in tiles (pipeline/vae_tiling.h defaults)
  // The DiT block linears a GGUF keeps as GGML blocks on CUDA (ErnieDit::load): name -> stored bytes.
  std::map<std::string, size_t> dit_ggml_bytes;
};

struct MemoryEstimate {
  size_t text_encoder = 0, prompt_enhancer = 0, dit = 0, vae = 0;  // weights
  size_t dit_blocks = 0, dit_block = 0;  // the DiT's transformer blocks: all of them, the largest one
  size_t text_act = 0, pe_act = 0, dit_act = 0, vae_act = 0;                        // working memory
  size_t peak(Offload mode) const;  // the largest the device holds at once under `mode`
};
MemoryEstimate estimate_memory(const ModelShapes& m, const GenerationShape& g);

// What a converted file stores in 8 bits (judged by a middle layer of each model), planned as the default
// QuantPolicy places 8-bit weights: the DiT's 8-bit dtype (none when bf16), and whether the text encoder's
// projections are 8-bit.
struct Stored8bit {
  std::optional<DType> dit;
  bool text_encoder = false;
};
Stored8bit stored_8bit(const ModelFolder& m);
// g's 8-bit weights: the DiT's under --quantize `quantize`, else as `m` stores them; the text encoder's as the
// policy quantizes it under `quantize`, or as `m` stores it. `m` may be null (random weights).
void set_8bit_weights(GenerationShape& g, const ModelFolder* m, std::optional<DType> quantize);

// The least offloading whose peak fits `budget_bytes` (none, then text-encoder, then blocks). Throws an
// Error giving every mode's need when even blocks does not fit.
Offload plan_offload(const MemoryEstimate& e, size_t budget_bytes);

// doctor's line for a GPU with `usable` bytes: "fits resident (--offload none)", "needs --offload MODE" or
// "too small even with --offload blocks at this size"; with `as_fp8` (the same model as an fp8 file) the
// advice to convert is added when that file would need less offloading, or would fit where this does not.
std::string gpu_fit(const MemoryEstimate& e, size_t usable, const MemoryEstimate* as_fp8 = nullptr);

// The same over (mode, VAE tiling): none, none + tiled decode, text-encoder, text-encoder + tiled, blocks,
// blocks + tiled; tiling only when `allow_tiling` (the pipeline's automatic tiling follows the allocator
// cap, so a plan that needs it gets it). With g.vae_tiling set, every step is tiled.
struct MemoryPlan {
  Offload offload = Offload::None;
  bool vae_tiling = false;
  size_t peak = 0;  // estimated bytes
};
MemoryPlan plan_memory(const ModelShapes& m, const GenerationShape& g, size_t budget_bytes, bool allow_tiling);

std::string gib_str(size_t bytes);  // "7.42 GiB"

// What the user asked for (generate and serve's --offload / --max-vram, the C API's ernie_memory_options):
// an offload mode, or a budget for the planner to pick one, or neither (the caller's default mode).
struct MemoryFlags {
  std::optional<std::string> offload;      // "none", "text-encoder", "blocks"
  std::optional<double> max_vram_gib;      // > 0
};
// Throws naming the flag on: both given, a budget that is not a positive size, an unknown mode, a budget
// or --offload blocks on a CPU device (the CPU computes in host memory).
void check_memory_flags(const MemoryFlags& f, Device device);

// The low-VRAM mode to load with. With a budget: the least offloading (and VAE tiling, when
// `allow_tiling`) whose estimated peak fits (plan_memory), the budget to cap the allocator at, and that
// peak; else the mode given, or `fallback`, with its estimated peak. On the CPU nothing is estimated.
// Throws as check_memory_flags does, and when nothing fits the budget.
struct OffloadChoice {
  Offload mode = Offload::TextEncoder;
  bool vae_tiling = false;    // the plan counts on a tiled decode (automatic under the allocator cap)
  size_t limit_bytes = 0;     // the budget in bytes (0: none)
  size_t estimate_bytes = 0;  // estimated peak of `mode` for the planned shape (0 on the CPU)
};
OffloadChoice choose_offload(const ModelShapes& m, const GenerationShape& g, Device device, const MemoryFlags& f,
                             Offload fallback, bool allow_tiling);

// ---- the shapes a front end plans for, and the plan Engine::open loads with ----
// The model's components as the planner sees them; the prompt enhancer only `with_pe`.
ModelShapes model_shapes(const ModelFolder& m, bool with_pe);

// A resolved request: its size, denoiser rows (images, twice with guidance > 1), and its longest prompt
// in tokens (2048 with the prompt enhancer, which may write that many).
GenerationShape request_shape(const GenerateRequest& resolved, DType act, int prompt_tokens, VaeTilingMode tiling);

// What a long-running process (serve, the C API) plans for when it loads: one image at the model's
// default size and guidance, with the longest prompt the tokenizer keeps (its model_max_length, 2048 for
// the release and with the prompt enhancer). Larger requests run under the same allocator cap and may
// fail with out-of-memory. Reads the tokenizer only on CUDA (the CPU plans nothing).
GenerationShape serving_shape(const ModelFolder& m, Device device, DType act, bool with_pe, VaeTilingMode tiling);

// choose_offload for `g` on model `m`: the DiT's and the text encoder's weights 8-bit under `quantize`, or as
// the file stores them (stored_8bit); the prompt enhancer counted `with_pe`; tiling allowed unless `tiling`
// is Off.
OffloadChoice plan_model_memory(const ModelFolder& m, const GenerationShape& g, const MemoryFlags& f, Device device,
                                Offload fallback, std::optional<DType> quantize, bool with_pe, VaeTilingMode tiling);

}  // namespace ernie
