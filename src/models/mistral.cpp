// Mistral / Ministral3 decoder (transformers' MistralModel / Ministral3ForCausalLM), written against the
// op set: embed_tokens -> layers (RMSNorm, GQA self-attention with rotate-half RoPE, residual, RMSNorm,
// SwiGLU MLP, residual) -> [final norm -> LM head]. The text encoder stops after layer L-2.
#include "models/mistral.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "core/error.h"
#include "ops/ops.h"

namespace ernie {

// ---- RoPE --------------------------------------------------------------------------------------------------

RopeFrequencies mistral_rope_frequencies(const MistralConfig& cfg) {
  const int dim = cfg.head_dim;
  const double base = cfg.rope_theta;
  RopeFrequencies r;
  r.inv_freq.resize(size_t(dim / 2));
  // base ** (2j / dim), in fp32 as transformers computes it.
  auto pos_freq = [&](int j) { return float(std::pow(base, double(float(2 * j) / float(dim)))); };
  if (cfg.rope_type == "default") {
    for (int j = 0; j < dim / 2; ++j) r.inv_freq[size_t(j)] = 1.f / pos_freq(j);
    return r;
  }
  ERNIE_CHECK(cfg.rope_type == "yarn", "mistral: unsupported rope_type '", cfg.rope_type, "'");
  // transformers' _compute_yarn_parameters.
  const double factor = cfg.factor;
  auto get_mscale = [](double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; };
  double attention = cfg.attention_factor;
  if (attention <= 0)
    attention = (cfg.mscale != 0 && cfg.mscale_all_dim != 0)
                    ? get_mscale(factor, cfg.mscale) / get_mscale(factor, cfg.mscale_all_dim)
                    : get_mscale(factor, 1.0);
  r.attention_scaling = float(attention);
  auto correction_dim = [&](double rotations) {
    return dim * std::log(cfg.original_max_position_embeddings / (rotations * 2 * M_PI)) / (2 * std::log(base));
  };
  double low = correction_dim(cfg.beta_fast), high = correction_dim(cfg.beta_slow);
  if (cfg.rope_truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0), high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;  // prevent a singular ramp
  for (int j = 0; j < dim / 2; ++j) {
    const float ramp = std::clamp(float((float(j) - low) / (high - low)), 0.f, 1.f);
    const float extrapolation_factor = 1.f - ramp;
    const float pf = pos_freq(j);
    const float inv_extrapolation = 1.f / pf, inv_interpolation = 1.f / (float(factor) * pf);
    r.inv_freq[size_t(j)] =
        inv_interpolation * (1.f - extrapolation_factor) + inv_extrapolation * extrapolation_factor;
  }
  return r;
}

float llama4_query_scale(const MistralConfig& cfg, int64_t pos) {
  if (cfg.llama_4_scaling_beta == 0) return 1.f;
  const float floor_ratio = std::floor(float(pos) / float(cfg.original_max_position_embeddings));
  return 1.f + float(cfg.llama_4_scaling_beta) * std::log(1.f + floor_ratio);
}

namespace {

// cos/sin [1, T, head_dim] for positions pos0.. (the 64 angles repeated twice), times `row_scale(pos)`.
template <class RowScale>
void rope_tables(const RopeFrequencies& rope, int64_t pos0, int64_t T, RowScale row_scale, Device device, Tensor& cos,
                 Tensor& sin) {
  const int64_t half = int64_t(rope.inv_freq.size()), D = 2 * half;
  std::vector<float> c(size_t(T * D)), s(size_t(T * D));
  for (int64_t t = 0; t < T; ++t) {
    const float scale = row_scale(pos0 + t);
    for (int64_t j = 0; j < half; ++j) {
      const float angle = float(pos0 + t) * rope.inv_freq[size_t(j)];
      const float cv = float(std::cos(double(angle))) * rope.attention_scaling * scale;
      const float sv = float(std::sin(double(angle))) * rope.attention_scaling * scale;
      c[size_t(t * D + j)] = c[size_t(t * D + j + half)] = cv;
      s[size_t(t * D + j)] = s[size_t(t * D + j + half)] = sv;
    }
  }
  cos = Tensor::from_vector(c, {1, T, D}).to(device);
  sin = Tensor::from_vector(s, {1, T, D}).to(device);
}

// The tables of positions [pos0, pos0 + T), and the query's own (the llama-4 scale folded in) when that scale
// is not 1 throughout; else cos_q / sin_q stay undefined.
void rope_tables_qk(const RopeFrequencies& rope, const MistralConfig& cfg, int64_t pos0, int64_t T, Device device,
                    Tensor& cos, Tensor& sin, Tensor& cos_q, Tensor& sin_q) {
  rope_tables(rope, pos0, T, [](int64_t) { return 1.f; }, device, cos, sin);
  bool q_scaled = false;
  for (int64_t p = pos0; p < pos0 + T; ++p) q_scaled = q_scaled || llama4_query_scale(cfg, p) != 1.f;
  if (q_scaled) rope_tables(rope, pos0, T, [&](int64_t p) { return llama4_query_scale(cfg, p); }, device, cos_q, sin_q);
}

// Copies src [1, T, heads, head_dim] into rows [pos0, pos0 + T) of a cache tensor [1, capacity, heads, head_dim].
void write_cache_rows(const Tensor& cache, int64_t pos0, const Tensor& src) {
  ERNIE_CHECK(cache.dtype() == src.dtype() && cache.device() == src.device() && cache.dim(2) == src.dim(2) &&
                  cache.dim(3) == src.dim(3),
              "KV cache ", shape_str(cache.shape()), " ", dtype_name(cache.dtype()), " does not fit ",
              shape_str(src.shape()), " ", dtype_name(src.dtype()));
  Tensor dst = cache.reshape({cache.dim(1), cache.dim(2) * cache.dim(3)}).narrow(pos0, src.dim(1));
  if (dst.device().is_cpu()) std::memcpy(dst.raw(), src.raw(), src.nbytes());
  else device_memory_ops().copy(dst.raw(), dst.device(), src.raw(), src.device(), src.nbytes());
}

// Rows [pos0, pos0 + T) of a cache tensor as [1, T, heads, head_dim] (a view, written through by qkv_rope).
Tensor cache_rows(const Tensor& cache, int64_t pos0, int64_t T) {
  const Tensor rows = cache.reshape({cache.dim(1), cache.dim(2), cache.dim(3)}).narrow(pos0, T);
  return rows.reshape({1, T, cache.dim(2), cache.dim(3)});
}

// The first `n` cached rows as [1, n, heads, head_dim] (a view).
Tensor cached_rows(const Tensor& cache, int64_t n) {
  return cache.reshape({cache.dim(1), cache.dim(2), cache.dim(3)}).narrow(0, n).reshape({1, n, cache.dim(2), cache.dim(3)});
}

// `into` = the parts stacked by rows (8-bit ones with their row scales), and the parts released, when they
// are stored alike (else nothing changes).
void stack_rows(const std::vector<ops::Weight*>& parts, ops::Weight& into) {
  std::vector<Tensor> ws, scales;
  for (const ops::Weight* p : parts) {
    if (p->w.dtype() != parts[0]->w.dtype() || p->quantized() != parts[0]->quantized()) return;
    ws.push_back(p->w), scales.push_back(p->scale);
  }
  into = ops::Weight(ops::concat(ws, 0));
  if (parts[0]->quantized()) into.scale = ops::concat(scales, 0);
  for (ops::Weight* p : parts) *p = ops::Weight();
}

}  // namespace

// ---- loading --------------------------------------------------------------------------------------------------

MistralModel MistralModel::build(const MistralConfig& cfg, Device device, DType act, int n_layers,
                                 bool with_lm_head, const std::string& who, const TensorSource& source,
                                 std::optional<DType> quantize) {
  ERNIE_CHECK(act == DType::F32 || act == DType::BF16, who, ": activation dtype ", dtype_name(act),
              " is not supported (F32 or BF16)");
  ERNIE_CHECK(!device.is_cpu() || act == DType::F32, who, ": the CPU backend computes in F32, not ",
              dtype_name(act));
  const int n = n_layers < 0 ? cfg.num_hidden_layers : n_layers;
  ERNIE_CHECK(n >= 0 && n <= cfg.num_hidden_layers, who, ": cannot load ", std::to_string(n), " of ",
              std::to_string(cfg.num_hidden_layers), " layers");
  std::map<std::string, Shape> want;
  for (const TensorSpec& s : mistral_tensor_specs(cfg, with_lm_head)) want[s.name] = s.shape;
  auto get = [&](const std::string& name) {  // a float tensor: only the projections may come 8-bit
    const ops::Weight w = source(name, want.at(name));
    ERNIE_CHECK(!w.quantized(), who, ": tensor ", name, " is stored 8-bit, which only the projections may be");
    return w.w.to(device);
  };
  // A projection: 8-bit as the source gives it (with its scales), quantized here when asked, or float.
  auto proj = [&](const std::string& name) {
    const ops::Weight w = source(name, want.at(name));
    if (w.quantized()) return ops::Weight(w.w.to(device), w.scale.to(device));
    return quantize ? ops::quantize(w.w.to(device), *quantize) : ops::Weight(w.w.to(device));
  };

  MistralModel m;
  m.cfg_ = cfg;
  m.device_ = device;
  m.act_ = act;
  m.rope_ = mistral_rope_frequencies(cfg);
  m.embed_tokens = get("embed_tokens.weight");
  for (int i = 0; i < n; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    Layer l;
    l.input_layernorm = get(p + "input_layernorm.weight");
    l.q_proj = proj(p + "self_attn.q_proj.weight");
    l.k_proj = proj(p + "self_attn.k_proj.weight");
    l.v_proj = proj(p + "self_attn.v_proj.weight");
    l.o_proj = proj(p + "self_attn.o_proj.weight");
    l.post_attention_layernorm = get(p + "post_attention_layernorm.weight");
    l.gate_proj = proj(p + "mlp.gate_proj.weight");
    l.up_proj = proj(p + "mlp.up_proj.weight");
    l.down_proj = proj(p + "mlp.down_proj.weight");
    if (device.is_cuda()) {  // fewer, larger projections for decoding (see Layer)
      stack_rows({&l.q_proj, &l.k_proj, &l.v_proj}, l.qkv_proj);
      stack_rows({&l.gate_proj, &l.up_proj}, l.gate_up_proj);
    }
    m.layers_.push_back(std::move(l));
  }
  if (with_lm_head) {
    m.norm = get("norm.weight");
    m.lm_head = cfg.tie_word_embeddings ? m.embed_tokens : get("@lm_head.weight");
  }
  return m;
}

MistralModel MistralModel::load(const Component& comp, const MistralConfig& cfg, Device device, DType act,
                                int n_layers, bool with_lm_head, bool keep_8bit, std::optional<DType> quantize) {
  ERNIE_CHECK(!quantize || keep_8bit, comp.name, ": quantizing at load keeps the projections 8-bit (keep_8bit)");
  const std::string where = comp.dir.empty() ? comp.name : comp.dir;
  auto source = [&](const std::string& name, const Shape& shape) {
    const bool outside = name[0] == '@';  // '@': next to the language model ("lm_head.weight")
    const std::string full = outside ? comp.root + name.substr(1) : comp.stored_name(name);
    ERNIE_CHECK(comp.ckpt.contains(full), comp.name, ": missing tensor '", full, "' ", shape_str(shape), " in ",
                where);
    if (!outside && comp.is_quantized(name)) {
      // An 8-bit weight of a converted file: kept so, or expanded on the device (the host would take seconds
      // for the text encoder) to the activation dtype.
      auto [q, scale] = comp.quantized(name);
      ERNIE_CHECK(q.shape() == shape, comp.name, ": tensor '", full, "' has shape ", shape_str(q.shape()),
                  " but the config (", where, ") implies ", shape_str(shape));
      if (keep_8bit) return ops::Weight(q, scale);
      return ops::Weight(ops::dequantize({q.to(device), scale.to(device)}, device.is_cuda() ? act : DType::F32));
    }
    Tensor t = outside ? comp.ckpt.tensor(full) : comp.tensor(name);
    ERNIE_CHECK(t.shape() == shape, comp.name, ": tensor '", full, "' has shape ", shape_str(t.shape()),
                " but the config (", where, ") implies ", shape_str(shape));
    ERNIE_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::BF16 || t.dtype() == DType::F16, comp.name,
                ": tensor '", full, "' has dtype ", dtype_name(t.dtype()), " (expected BF16, F16 or F32)");
    return ops::Weight(t);  // on the CPU, build() keeps the mmap view itself
  };
  return build(cfg, device, act, n_layers, with_lm_head, comp.name, source, quantize);
}

KVCache MistralModel::new_cache(int64_t capacity) const {
  ERNIE_CHECK(capacity > 0, "KV cache: capacity must be positive, got ", std::to_string(capacity));
  KVCache c;
  for (size_t i = 0; i < layers_.size(); ++i) {
    c.k.push_back(Tensor::zeros({1, capacity, cfg_.num_key_value_heads, cfg_.head_dim}, act_, device_));
    c.v.push_back(Tensor::zeros({1, capacity, cfg_.num_key_value_heads, cfg_.head_dim}, act_, device_));
  }
  rope_tables_qk(rope_, cfg_, 0, capacity, device_, c.cos, c.sin, c.cos_q, c.sin_q);
  return c;
}

size_t MistralModel::weight_bytes() const {
  size_t n = 0;
  for (const Tensor* t : {&embed_tokens, &norm}) n += t->defined() ? t->nbytes() : 0;
  if (lm_head.defined() && lm_head.raw() != embed_tokens.raw()) n += lm_head.nbytes();  // unless tied
  for (const Layer& l : layers_) {
    for (const Tensor* t : {&l.input_layernorm, &l.post_attention_layernorm}) n += t->nbytes();
    for (const ops::Weight* w : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj,
                                 &l.qkv_proj, &l.gate_up_proj})
      n += w->nbytes();
  }
  return n;
}

// ---- forward --------------------------------------------------------------------------------------------------

Tensor MistralModel::dense(const ops::Weight& w) const { return w.quantized() ? ops::dequantize(w, act_) : w.w; }

Tensor MistralModel::normed(const Input& in, Tensor& sum) const {
  if (!in.delta.defined()) {
    sum = in.hidden;
    return ops::rms_norm(in.hidden, in.norm, cfg_.rms_norm_eps);
  }
  ops::SumNorm r = ops::add_rms_norm(in.hidden, in.delta, in.norm, cfg_.rms_norm_eps);
  sum = r.sum;
  return r.normed;
}

Tensor MistralModel::self_attn(const Layer& l, const Input& in, Tensor& sum, const Tensor& cos_q, const Tensor& sin_q,
                               const Tensor& cos_k, const Tensor& sin_k, int64_t pos0, Tensor* k_cache,
                               Tensor* v_cache) const {
  const int64_t T = in.hidden.dim(0), Hq = cfg_.num_attention_heads, Hkv = cfg_.num_key_value_heads, D = cfg_.head_dim;
  Tensor query_states, key_states, value_states;
  // apply_rotary_pos_emb; the llama-4 query scale (ministral3) is folded into the query's tables.
  if (l.qkv_proj.defined()) {
    // One projection for q|k|v (with the add and norm in front), then the split, RoPE and the new keys/values
    // into the cache in one op.
    ops::SumOut p = ops::add_rms_norm_linear(in.hidden, in.delta, in.norm, cfg_.rms_norm_eps, dense(l.qkv_proj));
    sum = p.sum;
    if (k_cache && T == 1) {  // decoding one token: RoPE, its cache rows and the attention in one op
      const Tensor attn = ops::qkv_rope_attention(p.out.reshape({1, 1, -1}), Hq, Hkv, cos_q, sin_q, cos_k, sin_k,
                                                  *k_cache, *v_cache, pos0, 1.f / std::sqrt(float(D)));
      return ops::linear(attn.reshape({T, Hq * D}), dense(l.o_proj));
    }
    ops::Qkv a = ops::qkv_rope(p.out.reshape({1, T, -1}), Hq, Hkv, cos_q, sin_q, cos_k, sin_k,
                               k_cache ? cache_rows(*k_cache, pos0, T) : Tensor(),
                               v_cache ? cache_rows(*v_cache, pos0, T) : Tensor());
    query_states = a.q, key_states = a.k, value_states = a.v;
  } else {
    const Tensor x = normed(in, sum);
    query_states = ops::rope(ops::linear(x, dense(l.q_proj)).reshape({1, T, Hq, D}), cos_q, sin_q);
    key_states = ops::rope(ops::linear(x, dense(l.k_proj)).reshape({1, T, Hkv, D}), cos_k, sin_k);
    value_states = ops::linear(x, dense(l.v_proj)).reshape({1, T, Hkv, D});
    if (k_cache) {
      write_cache_rows(*k_cache, pos0, key_states);
      write_cache_rows(*v_cache, pos0, value_states);
    }
  }
  if (k_cache) {
    key_states = cached_rows(*k_cache, pos0 + T);
    value_states = cached_rows(*v_cache, pos0 + T);
  }
  ops::AttentionMask mask;
  mask.causal = true;
  mask.q_offset = pos0;
  if (k_cache) mask.stable_keys = pos0;  // this step writes rows pos0.. only
  Tensor attn_output = ops::attention(query_states, key_states, value_states, 1.f / std::sqrt(float(D)), mask);
  return ops::linear(attn_output.reshape({T, Hq * D}), dense(l.o_proj));
}

// down_proj(act_fn(gate_proj(x)) * up_proj(x)); on CUDA gate|up is one projection (with the add and norm in
// front) whose GEMV applies the activation.
Tensor MistralModel::mlp(const Layer& l, const Input& in, Tensor& sum) const {
  if (l.gate_up_proj.defined()) {
    ops::SumOut p =
        ops::add_rms_norm_linear(in.hidden, in.delta, in.norm, cfg_.rms_norm_eps, dense(l.gate_up_proj), true);
    sum = p.sum;
    return ops::linear(p.out, dense(l.down_proj));
  }
  const Tensor x = normed(in, sum);
  const Tensor h = ops::swiglu(ops::linear(x, dense(l.gate_proj)), ops::linear(x, dense(l.up_proj)));
  return ops::linear(h, dense(l.down_proj));
}

Tensor MistralModel::forward(const std::vector<int64_t>& ids, int n_layers, KVCache* cache) const {
  ERNIE_CHECK(!ids.empty(), "mistral forward: no token ids");
  for (int64_t id : ids)
    ERNIE_CHECK(id >= 0 && id < cfg_.vocab_size, "mistral forward: token id ", std::to_string(id),
                " outside the vocabulary [0, ", std::to_string(cfg_.vocab_size), ")");
  return run_layers(ops::embedding(embed_tokens, ids, device_, act_), n_layers, cache);
}

Tensor MistralModel::forward_from_device(const Tensor& ids, int n_layers, KVCache* cache) const {
  ERNIE_CHECK(ids.defined() && ids.numel() > 0 && ids.device() == device_, "mistral forward: no token ids on ",
              device_.str());
  return run_layers(ops::embedding(embed_tokens, ids.reshape({ids.numel()}), act_), n_layers, cache);
}

Tensor MistralModel::run_layers(Tensor hidden_states, int n_layers, KVCache* cache) const {
  ERNIE_CHECK(n_layers >= 0 && n_layers <= num_layers(), "mistral forward: ", std::to_string(n_layers),
              " layers requested, ", std::to_string(num_layers()), " loaded");
  const int64_t T = hidden_states.dim(0), pos0 = cache ? cache->length : 0;
  if (cache) {
    ERNIE_CHECK(int(cache->k.size()) >= n_layers && cache->v.size() == cache->k.size(), "KV cache has ",
                std::to_string(cache->k.size()), " layers, forward runs ", std::to_string(n_layers));
    ERNIE_CHECK(pos0 + T <= cache->capacity(), "KV cache full: ", std::to_string(pos0), " cached + ",
                std::to_string(T), " new tokens exceed capacity ", std::to_string(cache->capacity()));
  }
  Tensor cos, sin, cos_q, sin_q;
  if (cache && cache->cos.defined()) {  // rows pos0.. of the cache's tables (views)
    auto rows = [&](const Tensor& t) {
      return t.defined() ? t.reshape({t.dim(1), t.dim(2)}).narrow(pos0, T).reshape({1, T, t.dim(2)}) : Tensor();
    };
    cos = rows(cache->cos), sin = rows(cache->sin), cos_q = rows(cache->cos_q), sin_q = rows(cache->sin_q);
  } else {
    rope_tables_qk(rope_, cfg_, pos0, T, device_, cos, sin, cos_q, sin_q);
  }
  if (!cos_q.defined()) cos_q = cos, sin_q = sin;

  // The reference's `residual + h` after each sublayer is deferred into the next sublayer's input (Input).
  Tensor delta;
  for (int i = 0; i < n_layers; ++i) {
    const Layer& l = layers_[size_t(i)];
    Tensor sum;
    delta = self_attn(l, {hidden_states, delta, l.input_layernorm}, sum, cos_q, sin_q, cos, sin, pos0,
                      cache ? &cache->k[size_t(i)] : nullptr, cache ? &cache->v[size_t(i)] : nullptr);
    hidden_states = sum;
    delta = mlp(l, {hidden_states, delta, l.post_attention_layernorm}, sum);
    hidden_states = sum;
  }
  if (delta.defined()) hidden_states = ops::add(hidden_states, delta);
  if (cache) cache->length += T;
  return hidden_states;
}

Tensor MistralModel::head_logits(const Tensor& hidden) const {
  ERNIE_CHECK(lm_head.defined(), "mistral logits: the model was loaded without the final norm and LM head");
  ERNIE_CHECK(hidden.ndim() == 2 && hidden.dim(1) == cfg_.hidden_size, "mistral logits: hidden ",
              shape_str(hidden.shape()), " must be [T, ", std::to_string(cfg_.hidden_size), "]");
  return ops::linear(ops::rms_norm(hidden, norm, cfg_.rms_norm_eps), lm_head);
}

Tensor MistralModel::logits(const Tensor& hidden) const {
  Tensor y = head_logits(hidden);
  return y.dtype() == DType::F32 ? y : ops::cast(y, DType::F32);
}

// ---- text encoder ---------------------------------------------------------------------------------------------

TextEncoder TextEncoder::load(const ModelFolder& m, Device device, DType act, std::optional<DType> quantize) {
  TextEncoder te;
  // hidden_states[-2]: the output of layer L-2, so layers 0..L-2 (L-1 of them) are all that run.
  // 8-bit projections stay 8-bit on the device (half the memory) and run weight-only (dense()).
  te.lm_ = MistralModel::load(m.text_encoder_c, m.text_encoder, device, act, m.text_encoder.num_hidden_layers - 1,
                              false, /*keep_8bit=*/true, quantize);
  return te;
}

Tensor TextEncoder::encode(const std::vector<int64_t>& ids) const {
  ERNIE_CHECK(!ids.empty(), "text encoder: no token ids (an empty prompt still has BOS)");
  return lm_.forward(ids, lm_.num_layers());
}

}  // namespace ernie
