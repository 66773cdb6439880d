// The low-VRAM mode a pipeline loads with, for every front end (generate and serve's --offload /
// --max-vram, the C API's ernie_memory_options): the generation to plan for, io/memory_plan.h's choice
// for it (choose_offload), and that choice written into PipelineOptions.
#pragma once
#include "io/memory_plan.h"
#include "io/model_folder.h"
#include "pipeline/pipeline.h"

namespace ernie {

// The model's components as the planner sees them; the prompt enhancer only `with_pe`.
ModelShapes model_shapes(const ModelFolder& m, bool with_pe);

// A resolved request: its size, denoiser rows (images, twice with guidance > 1), and its longest prompt
// in tokens (2048 with the prompt enhancer, which may write that many).
GenerationShape request_shape(const GenerateRequest& resolved, DType act, int prompt_tokens, VaeTilingMode tiling);

// What a long-running process (serve, the C API) plans for when it loads: one image at the model's
// default size and guidance, with the longest prompt the tokenizer keeps (its model_max_length, 2048 for
// the release and with the prompt enhancer). Larger requests run under the same allocator cap and may
// fail with out-of-memory. Reads the tokenizer only on CUDA (the CPU plans nothing).
GenerationShape serving_shape(const ModelFolder& m, const PipelineOptions& popt);

// choose_offload for `g`, with the DiT's and the text encoder's weights 8-bit under popt.quantize, and what a
// converted file stores in 8 bits (stored_8bit), the prompt enhancer counted when popt.load_pe, tiling allowed unless
// popt.vae_tiling is Off; then sets popt's keep_text_encoder (mode none), offload_blocks (mode blocks),
// memory_limit (the budget) and vae_tiling (On when the plan needs a tiled decode).
OffloadChoice plan_pipeline_memory(const ModelFolder& m, const GenerationShape& g, const MemoryFlags& f,
                                   Offload fallback, PipelineOptions& popt);

}  // namespace ernie
