// ErnieImageTransformer2DModel forward (diffusers transformer_ernie_image.py), against the op set.
#include "models/ernie_dit.h"

#include "ops/collectives/communicator.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "models/weights/dit_weights.h"
#include "ops/ops.h"

namespace ernie {

namespace {
std::string str(int64_t v) { return std::to_string(v); }
bool is_fp8(const ops::Weight& w) { return w.quantized() && w.w.dtype() == DType::F8_E4M3; }
}  // namespace

// ---- weights ------------------------------------------------------------------------------------------------

std::vector<ops::Weight*> ErnieDit::Block::linears() {
  return {&to_q, &to_k, &to_v, &to_qkv, &to_out, &gate_proj, &up_proj, &linear_fc2};
}

std::vector<Tensor*> ErnieDit::Block::tensors() {
  std::vector<Tensor*> ts = {&adaLN_sa_ln, &adaLN_mlp_ln, &norm_q, &norm_k};
  for (ops::Weight* w : linears()) {
    ts.push_back(&w->w);
    ts.push_back(&w->scale);
    ts.push_back(&w->input_scale);
  }
  return ts;
}

bool ErnieDit::Block::Sides::any() const {
  for (const LoraSide* s : {&to_q, &to_k, &to_v, &to_qkv, &to_out, &gate_proj, &up_proj, &linear_fc2})
    if (s->defined()) return true;
  return false;
}

ErnieDit ErnieDit::build(const DitConfig& cfg, Device device, DType act, const WeightSource& stored,
                         bool stream_blocks, std::optional<DType> quantize, const QuantPolicy& policy,
                         const LoraSet& loras, bool lora_at_runtime) {
  ERNIE_CHECK(!device.is_cpu() || act == DType::F32, "ErnieDit: the CPU backend computes in F32, not ",
              dtype_name(act));
  ERNIE_CHECK(act == DType::F32 || act == DType::BF16, "ErnieDit: activations must be F32 or BF16, not ",
              dtype_name(act));
  ERNIE_CHECK(cfg.patch_size == 1, "ErnieDit: patch_size ", str(cfg.patch_size), " is not supported (only 1)");
  ERNIE_CHECK(!stream_blocks || device.is_cuda(), "ErnieDit: streaming blocks needs a CUDA device, not ",
              device.str());
  ErnieDit d;
  d.cfg_ = cfg;
  d.device_ = device;
  d.act_ = act;
  // Which form each weight takes (LoRA merged or beside it, 8-bit, GGML blocks, streamed): models/weights/.
  DitWeights weights(cfg, device, act, stored, quantize, policy, loras, lora_at_runtime);
  auto w = [&](const std::string& name) { return weights.resident(name); };
  const int64_t H = cfg.hidden_size;
  d.x_embedder_w = w("x_embedder.proj.weight").reshape({H, cfg.in_channels});  // 1x1 conv = linear
  d.x_embedder_b = w("x_embedder.proj.bias");
  if (cfg.text_in_dim != cfg.hidden_size) d.text_proj = w("text_proj.weight");
  d.time_linear_1_w = w("time_embedding.linear_1.weight");
  d.time_linear_1_b = w("time_embedding.linear_1.bias");
  d.time_linear_2_w = w("time_embedding.linear_2.weight");
  d.time_linear_2_b = w("time_embedding.linear_2.bias");
  d.adaLN_modulation_w = w("adaLN_modulation.1.weight");
  d.adaLN_modulation_b = w("adaLN_modulation.1.bias");
  auto block = [&](int l, bool streaming) {
    const std::string p = "layers." + std::to_string(l) + ".";
    auto bw = [&](const std::string& n) { return weights.block_tensor(p + n, streaming); };
    auto lin = [&](const std::string& n) { return weights.block_linear(p + n, streaming); };
    auto side = [&](const std::string& n) { return weights.side(p + n); };
    Block b;
    b.adaLN_sa_ln = bw("adaLN_sa_ln.weight");
    b.adaLN_mlp_ln = bw("adaLN_mlp_ln.weight");
    b.to_q = lin("self_attention.to_q.weight");
    b.to_k = lin("self_attention.to_k.weight");
    b.to_v = lin("self_attention.to_v.weight");
    b.to_out = lin("self_attention.to_out.0.weight");
    if (cfg.qk_layernorm) {
      b.norm_q = bw("self_attention.norm_q.weight");
      b.norm_k = bw("self_attention.norm_k.weight");
    }
    b.gate_proj = lin("mlp.gate_proj.weight");
    b.up_proj = lin("mlp.up_proj.weight");
    b.linear_fc2 = lin("mlp.linear_fc2.weight");
    b.lora = {side("self_attention.to_q.weight"), side("self_attention.to_k.weight"), side("self_attention.to_v.weight"),
              {}, side("self_attention.to_out.0.weight"), side("mlp.gate_proj.weight"), side("mlp.up_proj.weight"),
              side("mlp.linear_fc2.weight")};
    check_shared_input_scale({&b.to_q, &b.to_k, &b.to_v}, p + "self_attention.to_q, to_k and to_v");
    check_shared_input_scale({&b.gate_proj, &b.up_proj}, p + "mlp.gate_proj and up_proj");
    // On CUDA q, k and v run as one GEMM, when stored alike. (Stacking gate|up the same way measured slower on
    // the H200: 0.1378 vs 0.1336 s/step.)
    if (device.is_cuda()) stack_by_rows({&b.to_q, &b.to_k, &b.to_v}, b.to_qkv);
    if (b.to_qkv.defined() && (b.lora.to_q.defined() || b.lora.to_k.defined() || b.lora.to_v.defined())) {
      auto rows = [&](const char* n) { return weights.rows(p + "self_attention." + n + ".weight"); };
      b.lora.to_qkv = stack_lora_sides({b.lora.to_q, b.lora.to_k, b.lora.to_v}, {rows("to_q"), rows("to_k"), rows("to_v")},
                                       device, act);
      b.lora.to_q = b.lora.to_k = b.lora.to_v = LoraSide{};
    }
    return b;
  };
  if (!stream_blocks) {
    for (int l = 0; l < cfg.num_layers; ++l) d.layers_.push_back(block(l, false));
  } else if (cfg.num_layers > 0) {
    // Blocks may differ in which tensors they have (8-bit or float linears): per block, the positions in
    // Block::tensors() of the ones it has, which become views into its slot.
    // The views also take back each linear's GGML geometry and adapters.
    std::vector<std::vector<size_t>> has(size_t(cfg.num_layers));
    std::vector<Block> proto(size_t(cfg.num_layers));
    d.streamer_ = std::make_shared<BlockStreamer>(cfg.num_layers, device, [&](int l) {
      Block b = block(l, true);
      proto[size_t(l)].lora = b.lora;
      const std::vector<ops::Weight*> from = b.linears(), to = proto[size_t(l)].linears();
      for (size_t k = 0; k < from.size(); ++k) to[k]->ggml = from[k]->ggml, to[k]->cols = from[k]->cols;
      std::vector<Tensor> ts;
      const std::vector<Tensor*> all = b.tensors();
      for (size_t i = 0; i < all.size(); ++i)
        if (all[i]->defined()) ts.push_back(*all[i]), has[size_t(l)].push_back(i);
      return ts;
    });
    for (int l = 0; l < cfg.num_layers; ++l) {
      Block& b = d.streamed_.emplace_back(proto[size_t(l)]);
      const std::vector<Tensor*> all = b.tensors();
      for (size_t k = 0; k < has[size_t(l)].size(); ++k) *all[has[size_t(l)][k]] = d.streamer_->views(l)[k];
    }
  }
  d.final_norm_w = w("final_norm.linear.weight");
  d.final_norm_b = w("final_norm.linear.bias");
  d.final_linear_w = w("final_linear.weight");
  d.final_linear_b = w("final_linear.bias");
  if (device.is_cuda()) ops::release_cached_memory(device);  // the load's temporaries (casts, stacking)
  return d;
}

ErnieDit ErnieDit::load(const ModelFolder& m, Device device, DType act, bool stream_blocks,
                        std::optional<DType> quantize, const QuantPolicy& policy, const LoraSet& loras,
                        bool lora_at_runtime, HostWeightCache* cache) {
  m.require_ok("transformer");
  const Component& comp = m.transformer_c;
  // On CUDA a GGUF's block-quantized weights stay blocks, de-quantized as each GEMM runs; the CPU, the
  // reference, reads them de-quantized to F32.
  WeightSource file = [&](const std::string& name) {
    if (device.is_cuda()) {
      auto [raw, info] = comp.stored_blocks(name);
      if (raw.defined()) return ops::Weight::ggml_blocks(raw, info->ggml_type, info->shape[1]);
    }
    auto [t, scale] = comp.quantized(name);
    ops::Weight w(t, scale);
    if (scale.defined()) w.input_scale = comp.input_scale(name);
    return w;
  };
  WeightSource cached = [&](const std::string& name) { return cache->get(name, file); };
  return build(m.dit, device, act, cache ? cached : file, stream_blocks, quantize, policy, loras, lora_at_runtime);
}

size_t ErnieDit::weight_bytes() const {
  size_t n = 0;
  for (const Tensor* t : {&x_embedder_w, &x_embedder_b, &text_proj, &time_linear_1_w, &time_linear_1_b,
                          &time_linear_2_w, &time_linear_2_b, &adaLN_modulation_w, &adaLN_modulation_b,
                          &final_norm_w, &final_norm_b, &final_linear_w, &final_linear_b})
    n += t->defined() ? t->nbytes() : 0;
  for (Block b : layers_)
    for (const Tensor* t : b.tensors()) n += t->defined() ? t->nbytes() : 0;
  return n + (streamer_ ? streamer_->device_bytes() : 0);
}

std::optional<DType> ErnieDit::quantized_dtype() const {
  for (Block b : streamer_ ? streamed_ : layers_)
    for (const ops::Weight* w : b.linears())
      if (w->quantized()) return w->w.dtype();
  return std::nullopt;
}

bool ErnieDit::runs_fp8_attention() const {
  return attention_fp8_ && quantized_dtype() == DType::F8_E4M3 && device_.is_cuda() &&
         ops::attention_fp8_supported(Tensor::empty({0}, act_, device_), cfg_.head_dim());
}

// ---- modules ------------------------------------------------------------------------------------------------

Tensor ErnieDit::to_act(const Tensor& input) const {
  Tensor t = input.to(device_);
  return t.dtype() == act_ ? t : ops::cast(t, act_);
}

// ErnieImagePatchEmbedDynamic with patch 1: the 1x1 conv is a linear over channels, tokens row-major.
Tensor ErnieDit::x_embedder(const Tensor& hidden_states) const {
  const int64_t B = hidden_states.dim(0), C = hidden_states.dim(1), N = hidden_states.dim(2) * hidden_states.dim(3);
  Tensor tokens = ops::permute(hidden_states, {0, 2, 3, 1}).reshape({B, N, C});
  return ops::linear(tokens, x_embedder_w, x_embedder_b);
}

// Timesteps(hidden, flip_sin_to_cos=False, downscale_freq_shift=0): [sin(t·f), cos(t·f)], f_i =
// exp(-ln(10000)·i/half). Float32 arithmetic in the reference's order.
Tensor ErnieDit::time_proj(const std::vector<float>& timestep) const {
  const int64_t B = int64_t(timestep.size()), dim = cfg_.hidden_size, half = dim / 2;
  std::vector<float> emb(size_t(B * dim), 0.f);
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = float(-std::log(10000.0)) * float(i) / float(half);
    const float freq = std::exp(exponent);
    for (int64_t b = 0; b < B; ++b) {
      const float arg = timestep[size_t(b)] * freq;
      emb[size_t(b * dim + i)] = std::sin(arg);
      emb[size_t(b * dim + half + i)] = std::cos(arg);
    }
  }
  return to_act(Tensor::from_vector(emb, {B, dim}));
}

// TimestepEmbedding: linear_1 -> SiLU -> linear_2.
Tensor ErnieDit::time_embedding(const Tensor& sample) const {
  Tensor h = ops::silu(ops::linear(sample, time_linear_1_w, time_linear_1_b));
  return ops::linear(h, time_linear_2_w, time_linear_2_b);
}

// adaLN_modulation = Sequential(SiLU, Linear(hidden, 6·hidden)), chunked in the reference's order.
ErnieDit::Modulation ErnieDit::adaLN_modulation(const Tensor& c) const {
  Tensor m = ops::linear(ops::silu(c), adaLN_modulation_w, adaLN_modulation_b);
  const int64_t H = cfg_.hidden_size;
  auto chunk = [&](int k) { return ops::slice(m, 1, k * H, H); };
  return {chunk(0), chunk(1), chunk(2), chunk(3), chunk(4), chunk(5)};
}

// ErnieImageEmbedND3: ids image (text_len, row, col), text (index, 0, 0); per axis angles pos·θ^(-2k/d),
// concatenated over the 3 axes (head_dim/2 angles), each angle repeated twice [θ0,θ0,θ1,θ1,...].
ErnieDit::Rotary ErnieDit::pos_embed(const std::vector<int64_t>& text_lens, int64_t Hp, int64_t Wp, int64_t Tmax,
                                     bool packed) const {
  const int64_t B = int64_t(text_lens.size()), N = Hp * Wp, D = cfg_.head_dim();
  std::vector<float> omega;  // D/2 frequencies, axis by axis
  for (int dim : cfg_.rope_axes_dim)
    for (int k = 0; k < dim; k += 2)
      omega.push_back(1.0f / std::pow(cfg_.rope_theta, float(k) / float(dim)));
  std::vector<float> cos, sin;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < N + (packed ? text_lens[size_t(b)] : Tmax); ++s) {
      const float ids[3] = {s < N ? float(text_lens[size_t(b)]) : float(s - N), s < N ? float(s / Wp) : 0.f,
                            s < N ? float(s % Wp) : 0.f};
      cos.resize(cos.size() + size_t(D)), sin.resize(sin.size() + size_t(D));
      float* c = &cos[cos.size() - size_t(D)];
      float* sn = &sin[sin.size() - size_t(D)];
      int64_t j = 0;
      for (int axis = 0; axis < 3; ++axis)
        for (int k = 0; k < cfg_.rope_axes_dim[size_t(axis)] / 2; ++k, ++j) {
          const float angle = ids[axis] * omega[size_t(j)];
          c[2 * j] = c[2 * j + 1] = std::cos(angle);
          sn[2 * j] = sn[2 * j + 1] = std::sin(angle);
        }
    }
  const Shape shape = packed ? Shape{1, int64_t(cos.size()) / D, D} : Shape{B, N + Tmax, D};
  return {Tensor::from_vector(cos, shape).to(device_), Tensor::from_vector(sin, shape).to(device_)};
}

ErnieDit::Rotary ErnieDit::cached_pos_embed(const std::vector<int64_t>& text_lens, int64_t Hp, int64_t Wp,
                                            int64_t Tmax, bool packed) const {
  std::vector<int64_t> key = text_lens;
  key.insert(key.end(), {Hp, Wp, Tmax, int64_t(packed)});
  std::lock_guard<std::mutex> lk(rotary_cache_->mu);
  if (rotary_cache_->key != key) {
    rotary_cache_->tables = pos_embed(text_lens, Hp, Wp, Tmax, packed);
    rotary_cache_->key = std::move(key);
  }
  return rotary_cache_->tables;
}

// With fp8 weights the GEMMs take fp8 codes (per token, or with the weights' static scale): the norm (and
// geglu) that produce a GEMM's input write them directly, once for every GEMM reading it (q, k, v; gate, up).
ErnieDit::LinearInput ErnieDit::norm_modulate(const Tensor& x, const Tensor& weight, const Tensor& shift,
                                              const Tensor& scale,
                                              std::initializer_list<const ops::Weight*> readers, bool codes) const {
  // With the calibration observer set, the float input is kept (the observer reads it).
  bool fp8 = codes && !input_observer_;
  for (const ops::Weight* r : readers) fp8 &= is_fp8(*r);
  if (fp8) {  // the readers' static scale, when they have one, is one scale (checked at load)
    const Tensor& fixed = (*readers.begin())->input_scale;
    return {Tensor(), ops::rms_norm_modulate_fp8(x, weight, cfg_.eps, shift, scale, fixed), x.dim(0), x.dim(1)};
  }
  return {ops::rms_norm_modulate(x, weight, cfg_.eps, shift, scale), ops::Weight(), x.dim(0), x.dim(1)};
}

Tensor ErnieDit::linear(const LinearInput& in, const ops::Weight& w, const LoraSide& side) const {
  if (!in.x8.defined()) {
    const Tensor y = ops::linear(in.x, w);
    if (!side.defined()) return y;
    return ops::add(y, ops::linear(ops::linear(in.x, ops::Weight(side.down)), ops::Weight(side.up)));
  }
  ERNIE_CHECK(!side.defined(), "ErnieDit: a LoRA side GEMM needs the float input");
  return ops::linear(in.x8, w, act_).reshape({in.B, in.S, w.w.dim(0)});
}

// x + gate · (in·Wᵀ), with an unmerged adapter's gate · (in·downᵀ)·upᵀ added the same way first.
static Tensor gated_residual(const Tensor& x, const Tensor& gate, const Tensor& in, const ops::Weight& w,
                             const LoraSide& side) {
  if (!side.defined()) return ops::linear_gated_residual(x, gate, in, w);
  const Tensor y = ops::linear_gated_residual(x, gate, ops::linear(in, ops::Weight(side.down)), ops::Weight(side.up));
  return ops::linear_gated_residual(y, gate, in, w);
}

// ErnieImageAttention with ErnieImageSingleStreamAttnProcessor: per-head RMSNorm on q and k, rotate-half
// RoPE, joint attention over image + valid text keys; to_out.0 is applied by layer() together with the
// gated residual.
namespace {

// Ulysses' exchanges (ErnieDit::forward_seq_parallel), n ranks, B rows. Token split -> head split:
// [B, s, H, D] (this rank's s tokens, every head) -> [B, n·s, H/n, D] (every token, this rank's heads).
Tensor tokens_to_heads(Communicator& c, const Tensor& t) {
  const int n = c.size();
  const int64_t B = t.dim(0), H = t.dim(2), Hn = H / n;
  std::vector<Tensor> parts;  // chunk j: rank j's heads of my tokens
  for (int j = 0; j < n; ++j) parts.push_back(ops::slice(t, 2, j * Hn, Hn));
  const Tensor in = ops::concat(parts, 0);  // [n·B, s, H/n, D]
  Tensor out = Tensor::empty(in.shape(), in.dtype(), in.device());
  c.all_to_all(in, out);  // chunk j: rank j's tokens of my heads
  std::vector<Tensor> seq;
  for (int j = 0; j < n; ++j) seq.push_back(out.narrow(j * B, B));
  return ops::concat(seq, 1);
}
// Head split -> token split: [B, n·s, H/n, D] -> [B, s, H, D].
Tensor heads_to_tokens(Communicator& c, const Tensor& t) {
  const int n = c.size();
  const int64_t B = t.dim(0), s = t.dim(1) / n;
  std::vector<Tensor> parts;  // chunk j: rank j's tokens of my heads
  for (int j = 0; j < n; ++j) parts.push_back(ops::slice(t, 1, j * s, s));
  const Tensor in = ops::concat(parts, 0);
  Tensor out = Tensor::empty(in.shape(), in.dtype(), in.device());
  c.all_to_all(in, out);  // chunk j: rank j's heads of my tokens
  std::vector<Tensor> heads;
  for (int j = 0; j < n; ++j) heads.push_back(out.narrow(j * B, B));
  return ops::concat(heads, 2);
}

}  // namespace

Tensor ErnieDit::self_attention(const Block& blk, const LinearInput& x, const Rotary& rope,
                                const ops::AttentionMask& mask, Communicator* seq) const {
  const int64_t B = x.B, S = x.S, heads = cfg_.num_attention_heads, D = cfg_.head_dim();
  const float scale = 1.0f / std::sqrt(float(D));
  Tensor query, key, value;
  if (blk.to_qkv.defined()) {  // one GEMM, then the split, the norms and RoPE in one pass
    const Tensor qkv = linear(x, blk.to_qkv, blk.lora.to_qkv);
    if (!seq && attention_fp8_ && blk.to_qkv.w.dtype() == DType::F8_E4M3 && ops::attention_fp8_supported(qkv, D)) {
      auto inputs = [&](const Tensor& rows, const Tensor& cos, const Tensor& sin) {
        return ops::qkv_norm_rope_fp8(rows, heads, blk.norm_q, blk.norm_k, cfg_.eps, cos, sin);
      };
      if (mask.segments.empty())
        return ops::attention_fp8(inputs(qkv, rope.cos, rope.sin), scale, mask, act_).reshape({B, S, heads * D});
      std::vector<ops::Qkv8> rows;  // packed rows: the fp8 inputs per row (views of its rows)
      int64_t at = 0;
      for (int64_t L : mask.segments) {
        rows.push_back(inputs(qkv.narrow_seq(at, L), rope.cos.narrow_seq(at, L), rope.sin.narrow_seq(at, L)));
        at += L;
      }
      return ops::attention_fp8(rows, scale, act_).reshape({B, S, heads * D});
    }
    ops::Qkv a = ops::qkv_norm_rope(qkv, heads, blk.norm_q, blk.norm_k, cfg_.eps, rope.cos, rope.sin);
    query = a.q, key = a.k, value = a.v;
  } else {
    query = linear(x, blk.to_q, blk.lora.to_q).reshape({B, S, heads, D});
    key = linear(x, blk.to_k, blk.lora.to_k).reshape({B, S, heads, D});
    value = linear(x, blk.to_v, blk.lora.to_v).reshape({B, S, heads, D});
    if (blk.norm_q.defined()) query = ops::rms_norm(query, blk.norm_q, cfg_.eps);
    if (blk.norm_k.defined()) key = ops::rms_norm(key, blk.norm_k, cfg_.eps);
    query = ops::rope(query, rope.cos, rope.sin);
    key = ops::rope(key, rope.cos, rope.sin);
  }
  if (seq) {  // Ulysses: attention over every token with this rank's heads
    const Tensor o = ops::attention(tokens_to_heads(*seq, query), tokens_to_heads(*seq, key),
                                    tokens_to_heads(*seq, value), scale, mask);
    return heads_to_tokens(*seq, o).reshape({B, S, heads * D});
  }
  return ops::attention(query, key, value, scale, mask).reshape({B, S, heads * D});
}

// ErnieImageFeedForward: linear_fc2(up_proj(x) * gelu(gate_proj(x))); linear_fc2 is applied by layer()
// together with the gated residual, so this returns its input (fp8 codes when linear_fc2 is fp8).
ErnieDit::LinearInput ErnieDit::mlp(const Block& blk, const LinearInput& x) const {
  Tensor gate = linear(x, blk.gate_proj, blk.lora.gate_proj), up = linear(x, blk.up_proj, blk.lora.up_proj);
  if (is_fp8(blk.linear_fc2) && !input_observer_ && !blk.lora.any())
    return {Tensor(), ops::geglu_fp8(gate, up, blk.linear_fc2.input_scale), x.B, x.S};
  return {ops::geglu(gate, up), ops::Weight(), x.B, x.S};
}

// ErnieImageSharedAdaLNBlock: x + gate_msa · to_out(attention), then + gate_mlp · linear_fc2(mlp), each
// projection and its gated residual in one op (linear_gated_residual: inside the fp8 GEMM on CUDA).
Tensor ErnieDit::layer(int index, const Block& blk, const Tensor& x, const Rotary& rope, const Modulation& mod,
                       const ops::AttentionMask& mask, Communicator* seq) const {
  // The calibration observer sees each linear's float input under the weight's checkpoint name (with it set,
  // no producer writes fp8 codes in place of the float input).
  auto observe = [&](const Tensor& in, std::initializer_list<const char*> weights) {
    if (!input_observer_) return;
    for (const char* w : weights) input_observer_("layers." + std::to_string(index) + "." + w, in);
  };
  const bool codes = !blk.lora.any();  // an unmerged adapter reads the float input
  LinearInput h = blk.to_qkv.defined()
                      ? norm_modulate(x, blk.adaLN_sa_ln, mod.shift_msa, mod.scale_msa, {&blk.to_qkv}, codes)
                      : norm_modulate(x, blk.adaLN_sa_ln, mod.shift_msa, mod.scale_msa, {&blk.to_q, &blk.to_k, &blk.to_v},
                                      codes);
  observe(h.x, {"self_attention.to_q.weight", "self_attention.to_k.weight", "self_attention.to_v.weight"});
  const Tensor attn = self_attention(blk, h, rope, mask, seq);
  observe(attn, {"self_attention.to_out.0.weight"});
  Tensor y = gated_residual(x, mod.gate_msa, attn, blk.to_out, blk.lora.to_out);
  h = norm_modulate(y, blk.adaLN_mlp_ln, mod.shift_mlp, mod.scale_mlp, {&blk.gate_proj, &blk.up_proj}, codes);
  observe(h.x, {"mlp.gate_proj.weight", "mlp.up_proj.weight"});
  const LinearInput m = mlp(blk, h);
  observe(m.x, {"mlp.linear_fc2.weight"});
  return m.x8.defined() ? ops::linear_gated_residual(y, mod.gate_mlp, m.x8, blk.linear_fc2)
                        : gated_residual(y, mod.gate_mlp, m.x, blk.linear_fc2, blk.lora.linear_fc2);
}

// ErnieImageAdaLNContinuous: LayerNorm without affine, then x·(1 + scale) + shift with
// [scale, shift] = linear(c) (no activation on c here).
Tensor ErnieDit::final_norm(const Tensor& x, const Tensor& c) const {
  Tensor scale_shift = ops::linear(c, final_norm_w, final_norm_b);
  const int64_t H = cfg_.hidden_size;
  Tensor scale = ops::slice(scale_shift, 1, 0, H), shift = ops::slice(scale_shift, 1, H, H);
  return ops::modulate(ops::layer_norm(x, Tensor(), Tensor(), cfg_.eps), shift, scale);
}

// ---- forward ------------------------------------------------------------------------------------------------

Tensor ErnieDit::forward(const Tensor& hidden_states, const std::vector<float>& timestep, const Tensor& text_bth,
                         const std::vector<int64_t>& text_lens, const LayerObserver& observe) const {
  return forward_impl(hidden_states, timestep, text_bth, text_lens, observe, nullptr);
}

Tensor ErnieDit::forward_seq_parallel(Communicator& seq, const Tensor& hidden_states, const std::vector<float>& timestep,
                                      const Tensor& text_bth, const std::vector<int64_t>& text_lens) const {
  ERNIE_CHECK(cfg_.num_attention_heads % seq.size() == 0, "--parallel ulysses: ", str(cfg_.num_attention_heads),
              " attention heads do not split over ", str(seq.size()), " ranks");
  ERNIE_CHECK(seq.device() == device_, "--parallel ulysses: rank on ", seq.device().str(), ", the DiT on ",
              device_.str());
  return forward_impl(hidden_states, timestep, text_bth, text_lens, {}, &seq);
}

Tensor ErnieDit::forward_impl(const Tensor& hidden_states, const std::vector<float>& timestep, const Tensor& text_bth,
                              const std::vector<int64_t>& text_lens, const LayerObserver& observe,
                              Communicator* seq) const {
  const char* where = "ErnieDit::forward: ";
  ERNIE_CHECK(hidden_states.defined() && hidden_states.ndim() == 4 && dtype_is_float(hidden_states.dtype()), where,
              "hidden_states must be a float [B, C, H, W] tensor, got ", shape_str(hidden_states.shape()));
  const int64_t B = hidden_states.dim(0), C = hidden_states.dim(1), Hp = hidden_states.dim(2),
                Wp = hidden_states.dim(3), N_img = Hp * Wp;
  ERNIE_CHECK(B >= 1 && Hp >= 1 && Wp >= 1, where, "hidden_states ", shape_str(hidden_states.shape()), " is empty");
  ERNIE_CHECK(C == cfg_.in_channels, where, "hidden_states has ", str(C), " channels but transformer in_channels is ",
              str(cfg_.in_channels));
  ERNIE_CHECK(int64_t(timestep.size()) == B, where, "got ", str(int64_t(timestep.size())),
              " timesteps for a batch of ", str(B));
  for (float t : timestep) ERNIE_CHECK(std::isfinite(t), where, "timestep ", std::to_string(t), " is not finite");
  ERNIE_CHECK(text_bth.defined() && text_bth.ndim() == 3 && dtype_is_float(text_bth.dtype()), where,
              "text_bth must be a float [B, Tmax, text_in_dim] tensor, got ", shape_str(text_bth.shape()));
  const int64_t Tmax = text_bth.dim(1);
  ERNIE_CHECK(text_bth.dim(0) == B && text_bth.dim(2) == cfg_.text_in_dim, where, "text_bth ",
              shape_str(text_bth.shape()), " does not match batch ", str(B), " and text_in_dim ",
              str(cfg_.text_in_dim));
  ERNIE_CHECK(int64_t(text_lens.size()) == B, where, "got ", str(int64_t(text_lens.size())),
              " text_lens for a batch of ", str(B));
  std::vector<int64_t> kv_len(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = text_lens[size_t(b)];
    ERNIE_CHECK(len >= 0 && len <= Tmax, where, "text_lens[", str(b), "] = ", str(len), " is outside [0, ",
                str(Tmax), "] (the padded text length)");
    kv_len[size_t(b)] = N_img + len;  // keys: every image token, then the valid text prefix
  }

  // Every row at the same timestep (the sampler's batches: cfg's two rows, several images): one time
  // embedding whose modulation vectors broadcast over the rows, which lets the GEMM epilogues take the gates.
  const bool shared_t = std::all_of(timestep.begin(), timestep.end(), [&](float t) { return t == timestep[0]; });
  // Rows of different text lengths (cfg: the prompt and a one-token negative) are packed: each row's image
  // tokens and valid text, the rows one after another in one sequence [1, ΣS_b, hidden], attention
  // block-diagonal over them (mask.segments) and every other op per token, so no padding row is computed.
  // This needs the shared modulation; with `observe` set the rows stay padded ([B, S, hidden] per layer).
  const bool packed = B > 1 && shared_t && !observe && !seq &&
                      std::any_of(text_lens.begin(), text_lens.end(), [&](int64_t len) { return len < Tmax; });

  Tensor img = x_embedder(to_act(hidden_states));
  Tensor text;
  if (Tmax > 0) {
    text = to_act(text_bth);
    if (text_proj.defined()) text = ops::linear(text, text_proj);
  }
  // Ulysses: the text padded (masked keys, discarded outputs) so that the ranks split the sequence evenly.
  int64_t T = Tmax;
  if (seq) {
    const int64_t pad = (seq->size() - (N_img + Tmax) % seq->size()) % seq->size();
    if (pad > 0) {
      const Tensor zeros = Tensor::zeros({B, pad, img.dim(2)}, img.dtype(), img.device());
      text = Tmax > 0 ? ops::concat({text, zeros}, 1) : zeros;
      T = Tmax + pad;
    }
  }
  Tensor x = img;
  ops::AttentionMask mask;
  if (packed) {
    std::vector<Tensor> rows;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t len = text_lens[size_t(b)];
      rows.push_back(img.narrow(b, 1));
      if (len > 0) rows.push_back(text.narrow(b, 1).narrow_seq(0, len));
      mask.segments.push_back(N_img + len);
    }
    x = ops::concat(rows, 1);
  } else {
    if (T > 0) x = ops::concat({img, text}, 1);
    mask.kv_len = kv_len;
  }
  Rotary rotary_pos_emb = cached_pos_embed(text_lens, Hp, Wp, T, packed);
  const int64_t S_all = N_img + T, s_local = seq ? S_all / seq->size() : S_all;
  if (seq) {  // this rank's tokens and their RoPE tables
    const int64_t at = seq->rank() * s_local;
    x = ops::slice(x, 1, at, s_local);
    rotary_pos_emb = {ops::slice(rotary_pos_emb.cos, 1, at, s_local), ops::slice(rotary_pos_emb.sin, 1, at, s_local)};
  }
  const Tensor c = time_embedding(time_proj(shared_t ? std::vector<float>{timestep[0]} : timestep));
  const Modulation mod = adaLN_modulation(c);
  for (int l = 0; l < cfg_.num_layers; ++l) {
    if (streamer_) streamer_->acquire(l);
    const Block& blk = streamer_ ? streamed_[size_t(l)] : layers_[size_t(l)];
    x = layer(l, blk, x, rotary_pos_emb, mod, mask, seq);
    if (streamer_) streamer_->release(l);
    if (observe) observe(l, x);
  }

  if (seq) {  // per token on this rank's share, then every rank gathers the whole sequence's output
    const Tensor mine = ops::linear(final_norm(x, c), final_linear_w, final_linear_b);  // [B, s, out]
    Tensor all = Tensor::empty({seq->size() * B, s_local, mine.dim(2)}, mine.dtype(), mine.device());
    seq->all_gather(mine, all);
    std::vector<Tensor> chunks;
    for (int j = 0; j < seq->size(); ++j) chunks.push_back(all.narrow(j * B, B));
    const Tensor patches = ops::slice(ops::concat(chunks, 1), 1, 0, N_img);
    return ops::permute(patches.reshape({B, Hp, Wp, cfg_.out_channels}), {0, 3, 1, 2});
  }
  // Per token from here: keep only the image tokens.
  if (packed) {
    std::vector<Tensor> imgs;
    int64_t at = 0;
    for (int64_t L : mask.segments) imgs.push_back(x.narrow_seq(at, N_img)), at += L;
    x = ops::concat(imgs, 0);
  } else {
    x = ops::slice(x, 1, 0, N_img);
  }
  x = final_norm(x, c);
  Tensor patches = ops::linear(x, final_linear_w, final_linear_b);  // [B, N_img, out]
  return ops::permute(patches.reshape({B, Hp, Wp, cfg_.out_channels}), {0, 3, 1, 2});
}

}  // namespace ernie
