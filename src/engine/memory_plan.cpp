#include "engine/memory_plan.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "models/quant_policy.h"
#include "io/model_folder.h"
#include "io/model_tokenizer.h"

namespace ernie {

std::string gib_str(size_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f GiB", double(bytes) / double(size_t(1) << 30));
  return b;
}

namespace {

// Weights as placed on the device: BF16 activations cast every weight to BF16; F32 keeps 4 bytes (the
// safe side for F32-stored or de-quantized weights). With `quantized` (the component whose weights are 8-bit:
// "transformer" under --quantize or from an 8-bit file, "text_encoder" from an 8-bit file), the weights the
// default QuantPolicy picks take a byte per element plus an F32 scale per row. `ggml`: tensors kept as GGML
// blocks, with their stored bytes.
size_t weight_bytes(const std::vector<TensorSpec>& specs, DType act, const std::string& prefix = "",
                    const std::string& quantized = "", int dit_layers = 0,
                    const std::map<std::string, size_t>& ggml = {}) {
  const QuantPolicy policy;
  size_t n = 0;
  for (const TensorSpec& s : specs) {
    if (!s.required || s.name.rfind(prefix, 0) != 0) continue;
    const size_t numel = size_t(shape_numel(s.shape));
    const auto kept = ggml.find(s.name);
    if (!quantized.empty() && policy.quantized(quantized, s.name, dit_layers))
      n += numel + size_t(s.shape[0]) * 4;
    else if (kept != ggml.end())
      n += kept->second;
    else
      n += numel * (act == DType::BF16 ? 2 : 4);
  }
  return n;
}

// The allocator rounds to four size classes per power of two: up to 25 % more.
size_t rounded(double bytes) { return size_t(bytes * 1.25); }

// One transformer layer's live activations per token: the residual stream and its normed copy, q/k/v and
// the attention output, the two FFN projections and their product, in the activation dtype.
double layer_act_per_token(int64_t hidden, int64_t ffn, DType act) {
  return double(8 * hidden + 4 * ffn) * double(dtype_size(act));
}

MistralConfig encoder_layers(MistralConfig c) {
  c.num_hidden_layers -= 1;  // hidden_states[-2]: the last layer is not loaded
  return c;
}

}  // namespace

Stored8bit stored_8bit(const ModelFolder& m) {
  // A middle layer's MLP projection of each model.
  auto stored = [](const Component& c, int layers) -> std::optional<DType> {
    const std::string name = "layers." + std::to_string(layers / 2) + ".mlp.up_proj.weight";
    const TensorInfo* info = layers > 0 && c.is_quantized(name) ? c.ckpt.find(c.stored_name(name)) : nullptr;
    return info ? std::optional<DType>(info->dtype) : std::nullopt;
  };
  return {stored(m.transformer_c, m.dit.num_layers),
          stored(m.text_encoder_c, m.text_encoder.num_hidden_layers).has_value()};
}

void set_8bit_weights(GenerationShape& g, const ModelFolder* m, std::optional<DType> quantize) {
  const Stored8bit stored = m ? stored_8bit(*m) : Stored8bit{};
  g.quantize = quantize ? quantize : stored.dit;
  g.text_encoder_8bit = stored.text_encoder || QuantPolicy{}.text_encoder_quantization(quantize);
  g.dit_ggml_bytes.clear();
  if (!m) return;
  const Component& c = m->transformer_c;
  for (const TensorSpec& s : dit_tensor_specs(m->dit)) {  // the block linears ErnieDit::load keeps as blocks
    if (s.name.rfind("layers.", 0) != 0 || s.shape.size() != 2 || !c.ckpt.contains(c.stored_name(s.name))) continue;
    const Tensor raw = c.stored_blocks(s.name).first;
    if (raw.defined()) g.dit_ggml_bytes[s.name] = raw.nbytes();
  }
}

MemoryEstimate estimate_memory(const ModelShapes& m, const GenerationShape& g) {
  MemoryEstimate e;
  const DType act = g.act;
  const double ab = double(dtype_size(act));
  e.text_encoder = weight_bytes(mistral_tensor_specs(encoder_layers(m.text_encoder), false), act, "",
                                g.text_encoder_8bit ? "text_encoder" : "");
  const MistralConfig& te = m.text_encoder;
  e.text_act = rounded(double(g.text_tokens) * layer_act_per_token(te.hidden_size, te.intermediate_size, act));
  if (m.pe) {
    const MistralConfig& pe = *m.pe;
    e.prompt_enhancer = weight_bytes(mistral_tensor_specs(pe, true), act);
    // KV cache for a prompt plus up to 2048 new tokens, and the prefill's F32 logits row block.
    const double tokens = 2048 + 1024;
    const double kv = 2.0 * pe.num_hidden_layers * pe.num_key_value_heads * pe.head_dim * tokens * ab;
    e.pe_act = rounded(kv + 1024.0 * layer_act_per_token(pe.hidden_size, pe.intermediate_size, act) +
                       double(pe.vocab_size) * 4.0 * 2);
  }
  const std::vector<TensorSpec> dit = dit_tensor_specs(m.dit);
  const std::string q = g.quantize ? "transformer" : "";
  const int L = m.dit.num_layers;
  const auto& kept = g.dit_ggml_bytes;
  e.dit = weight_bytes(dit, act, "", q, L, kept);
  e.dit_blocks = weight_bytes(dit, act, "layers.", q, L, kept);
  for (int l = 0; l < L; ++l)  // blocks differ when 8-bit (the first and last stay bf16) or GGML types mix
    e.dit_block = std::max(e.dit_block, weight_bytes(dit, act, "layers." + std::to_string(l) + ".", q, L, kept));
  const int64_t s = m.vae.scale_factor(), tokens = int64_t(g.height / s) * (g.width / s) + g.text_tokens;
  // Per row and token: a layer's activations, plus the full-width RoPE tables (cos, sin: F32).
  e.dit_act = rounded(double(g.rows) * double(tokens) *
                      (layer_act_per_token(m.dit.hidden_size, m.dit.ffn_hidden_size, act) + 8.0 * m.dit.head_dim()));
  e.vae = weight_bytes(vae_tensor_specs(m.vae), act);
  // The widest decoder layer at full resolution: input, two intermediate maps, output and a 3x3
  // convolution's im2col workspace (9x input), one image at a time; a tile side of 512 pixels when tiled.
  const double px = g.vae_tiling ? double(std::min(g.height, 512)) * std::min(g.width, 512)
                                 : double(g.height) * g.width;
  e.vae_act = rounded(px * m.vae.decoder_channels().front() * ab * (4 + 9));
  return e;
}

size_t MemoryEstimate::peak(Offload mode) const {
  const size_t work = std::max(dit_act, vae_act);
  if (mode == Offload::None) return text_encoder + prompt_enhancer + dit + vae + std::max({text_act, pe_act, work});
  const size_t denoiser = mode == Offload::Blocks ? dit - dit_blocks + 2 * dit_block : dit;
  return std::max({text_encoder + text_act, prompt_enhancer + pe_act, denoiser + vae + work});
}

Offload plan_offload(const MemoryEstimate& e, size_t budget_bytes) {
  for (Offload o : {Offload::None, Offload::TextEncoder, Offload::Blocks})
    if (e.peak(o) <= budget_bytes) return o;
  fail("--max-vram ", gib_str(budget_bytes), ": too little for this model and size even with --offload blocks (needs ",
       gib_str(e.peak(Offload::Blocks)), "; text-encoder ", gib_str(e.peak(Offload::TextEncoder)), ", none ",
       gib_str(e.peak(Offload::None)), "); try a smaller image, batch or guidance 1");
}

std::string gpu_fit(const MemoryEstimate& e, size_t usable, const MemoryEstimate* as_fp8) {
  auto mode = [usable](const MemoryEstimate& m) -> std::optional<Offload> {
    for (Offload o : {Offload::None, Offload::TextEncoder, Offload::Blocks})
      if (m.peak(o) <= usable) return o;
    return std::nullopt;
  };
  auto say = [](std::optional<Offload> o) {
    if (!o) return std::string("too small even with --offload blocks at this size");
    return *o == Offload::None ? std::string("fits resident (--offload none)") : "needs --offload " + std::string(offload_name(*o));
  };
  const std::optional<Offload> here = mode(e);
  std::string s = say(here);
  if (as_fp8) {
    const std::optional<Offload> fp8 = mode(*as_fp8);
    if (fp8 && (!here || int(*fp8) < int(*here))) {
      const std::string m = offload_name(*fp8);
      s += "; as an fp8 file (convert --dtype fp8) it " +
           (*fp8 == Offload::None ? "fits resident" : here ? "needs only --offload " + m : "fits with --offload " + m);
    }
  }
  return s;
}

MemoryPlan plan_memory(const ModelShapes& m, const GenerationShape& g, size_t budget_bytes, bool allow_tiling) {
  const MemoryEstimate untiled = estimate_memory(m, g);
  GenerationShape gt = g;
  gt.vae_tiling = true;
  const MemoryEstimate tiled = estimate_memory(m, gt);
  for (Offload o : {Offload::None, Offload::TextEncoder, Offload::Blocks}) {
    if (untiled.peak(o) <= budget_bytes) return {o, g.vae_tiling, untiled.peak(o)};
    if (allow_tiling && tiled.peak(o) <= budget_bytes) return {o, true, tiled.peak(o)};
  }
  plan_offload(allow_tiling ? tiled : untiled, budget_bytes);  // throws, naming what each mode needs
  return {};
}

void check_memory_flags(const MemoryFlags& f, Device device) {
  ERNIE_CHECK(!(f.offload && f.max_vram_gib), "give --offload or --max-vram, not both (--max-vram picks the offload mode)");
  if (f.offload) parse_offload(*f.offload);
  if (f.max_vram_gib) {
    const double gib = *f.max_vram_gib;
    ERNIE_CHECK(gib > 0, "--max-vram must be a positive size in GiB");  // NaN fails too
    ERNIE_CHECK(gib < 1 << 20, "--max-vram ", std::to_string(gib), ": not a size in GiB");
  }
  if (device.is_cpu()) {
    ERNIE_CHECK(!f.max_vram_gib, "--max-vram: applies to a CUDA device (--device cuda); the CPU computes in host memory");
    ERNIE_CHECK(!f.offload || parse_offload(*f.offload) != Offload::Blocks, "--offload blocks: streaming DiT blocks "
                "needs a CUDA device; on the CPU the weights already stay in host memory (use --offload text-encoder or none)");
  }
}

OffloadChoice choose_offload(const ModelShapes& m, const GenerationShape& g, Device device, const MemoryFlags& f,
                             Offload fallback, bool allow_tiling) {
  check_memory_flags(f, device);
  OffloadChoice c;
  c.mode = f.offload ? parse_offload(*f.offload) : fallback;
  if (device.is_cpu()) return c;
  if (f.max_vram_gib) {
    c.limit_bytes = size_t(*f.max_vram_gib * double(size_t(1) << 30));
    const MemoryPlan p = plan_memory(m, g, c.limit_bytes, allow_tiling);
    c.mode = p.offload;
    c.vae_tiling = p.vae_tiling;
    c.estimate_bytes = p.peak;
    return c;
  }
  c.estimate_bytes = estimate_memory(m, g).peak(c.mode);
  return c;
}

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

GenerationShape serving_shape(const ModelFolder& m, Device device, DType act, bool with_pe, VaeTilingMode tiling) {
  GenerateRequest probe;
  probe.prompt = "x";
  const GenerateRequest d = resolve_request(probe, model_limits(m));
  // The longest prompt: what the tokenizer keeps, or what the prompt enhancer writes if that is more.
  int tokens = kPromptEnhancerTokens;
  if (device.is_cuda()) {
    const size_t max_len = std::min<size_t>(load_model_tokenizer(m, "tokenizer").model_max_length(), 1 << 20);
    if (max_len > 0) tokens = with_pe ? std::max(tokens, int(max_len)) : int(max_len);
  }
  return request_shape(d, act, tokens, tiling);
}

OffloadChoice plan_model_memory(const ModelFolder& m, const GenerationShape& g, const MemoryFlags& f, Device device,
                                Offload fallback, std::optional<DType> quantize, bool with_pe, VaeTilingMode tiling) {
  GenerationShape gq = g;
  set_8bit_weights(gq, &m, quantize);
  return choose_offload(model_shapes(m, with_pe), gq, device, f, fallback, tiling != VaeTilingMode::Off);
}

}  // namespace ernie
