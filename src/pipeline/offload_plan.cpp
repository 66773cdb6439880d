#include "pipeline/offload_plan.h"

#include <algorithm>

#include "io/model_tokenizer.h"
#include "pipeline/request.h"

namespace ernie {

namespace {
constexpr int kPromptEnhancerTokens = 2048;  // the most the prompt enhancer writes
}  // namespace

ModelShapes model_shapes(const ModelFolder& m, bool with_pe) {
  return ModelShapes{m.dit, m.text_encoder, m.vae, with_pe ? m.pe : std::nullopt};
}

GenerationShape request_shape(const GenerateRequest& r, DType act, int prompt_tokens, VaeTilingMode tiling) {
  GenerationShape g;
  g.width = r.width;
  g.height = r.height;
  g.rows = r.num_images * (r.cfg > 1.0f ? 2 : 1);
  g.text_tokens = r.use_pe ? kPromptEnhancerTokens : std::max(prompt_tokens, 1);
  g.act = act;
  g.vae_tiling = tiling == VaeTilingMode::On;
  return g;
}

GenerationShape serving_shape(const ModelFolder& m, const PipelineOptions& popt) {
  GenerateRequest probe;
  probe.prompt = "x";
  const GenerateRequest d = resolve_request(probe, model_limits(m));
  // The longest prompt: what the tokenizer keeps, or what the prompt enhancer writes if that is more.
  int tokens = kPromptEnhancerTokens;
  if (popt.device.is_cuda()) {
    const size_t max_len = std::min<size_t>(load_model_tokenizer(m, "tokenizer").model_max_length(), 1 << 20);
    if (max_len > 0) tokens = popt.load_pe ? std::max(tokens, int(max_len)) : int(max_len);
  }
  return request_shape(d, popt.dtype, tokens, popt.vae_tiling);
}

OffloadChoice plan_pipeline_memory(const ModelFolder& m, const GenerationShape& g, const MemoryFlags& f,
                                   Offload fallback, PipelineOptions& popt) {
  GenerationShape gq = g;
  set_8bit_weights(gq, &m, popt.quantize);
  const OffloadChoice c = choose_offload(model_shapes(m, popt.load_pe), gq, popt.device, f, fallback,
                                         popt.vae_tiling != VaeTilingMode::Off);
  popt.keep_text_encoder = c.mode == Offload::None;
  popt.offload_blocks = c.mode == Offload::Blocks;
  popt.memory_limit = c.limit_bytes;
  if (c.vae_tiling) popt.vae_tiling = VaeTilingMode::On;
  return c;
}

}  // namespace ernie
