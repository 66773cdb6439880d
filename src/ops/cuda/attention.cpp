// attention: checks, then (per packed segment, if any) the split-key decode kernel (up to 4 query rows), the
// Hopper wgmma kernel (bf16, head_dim 128, not causal, sm_90), the mma.sync flash kernel (bf16, head_dim
// 16/32/64/128) or the simple kernel (F32, or any other head_dim <= 256). Batches beyond kMaxBatch run in
// slices (kv_len travels by value).
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "ops/cuda/attention_internal.h"
#include "ops/cuda/common.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/shape_rules.h"

namespace ernie::cuda {

namespace {
// ERNIE_ATTENTION=mma|simple|gemm forces a path (tests, measurements).
bool forced(const char* path) {
  const char* e = std::getenv("ERNIE_ATTENTION");
  return e && std::strcmp(e, path) == 0;
}

// One call's kernels, writing `out` (shaped like q; a view into a larger output for packed segments).
void attend(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, float scale, const ops::AttentionMask& mask) {
  const int64_t B = q.dim(0), Sq = q.dim(1), Hq = q.dim(2), D = q.dim(3), Sk = k.dim(1), Hkv = k.dim(2);
  cudaStream_t st = stream(detail::dev(q));
  const bool bf16 = q.dtype() == DType::BF16;
  const bool flash = bf16 && attn::flash_supported(int(D)) && aligned16(q.raw()) && aligned16(k.raw()) &&
                     aligned16(v.raw()) && !forced("simple") && !forced("gemm");
  // Long sequences without the flash kernel (f32, or head_dim > 128) and heads wider than the simple
  // kernel's 256 go through cuBLASLt.
  if (!flash && (D > 256 || forced("gemm") || (!forced("simple") && Sq * Sk >= (int64_t(1) << 20)))) {
    attn::gemm_path(q, k, v, out, scale, mask);
    return;
  }
  const bool wgmma = flash && !forced("mma") && attn::wgmma_supported(int(D), mask.causal, scale, detail::dev(q));
  const bool decode = attn::decode_supported(int(Sq), int(Hq), int(Hkv), int(D)) && !forced("mma") && !forced("simple");
  Tensor workspace = Tensor::empty({0}, DType::F32, q.device());
  const size_t q_batch = size_t(Sq * Hq * D) * dtype_size(q.dtype()), k_batch = size_t(Sk * Hkv * D) * dtype_size(q.dtype());
  for (int64_t b0 = 0; b0 < B; b0 += attn::kMaxBatch) {
    const int nb = int(std::min<int64_t>(attn::kMaxBatch, B - b0));
    attn::Params p{};
    p.q = static_cast<const char*>(q.raw()) + b0 * q_batch;
    p.k = static_cast<const char*>(k.raw()) + b0 * k_batch;
    p.v = static_cast<const char*>(v.raw()) + b0 * k_batch;
    p.o = static_cast<char*>(out.raw()) + b0 * q_batch;
    p.B = nb;
    p.Sq = int(Sq), p.Sk = int(Sk), p.Hq = int(Hq), p.Hkv = int(Hkv), p.D = int(D);
    p.scale = scale;
    p.causal = mask.causal;
    p.q_offset = mask.q_offset;
    p.stable_keys = mask.stable_keys;
    for (int i = 0; i < nb; ++i) p.kv_len[i] = int(mask.kv_len.empty() ? Sk : mask.kv_len[size_t(b0 + i)]);
    if (decode) attn::decode(p, q.dtype() == DType::BF16, workspace, st);
    else if (wgmma) attn::flash_wgmma(p, st);
    else if (flash) attn::flash_bf16(p, st);
    else attn::simple(p, bf16, st);
  }
}

}  // namespace

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, const ops::AttentionMask& mask) {
  detail::check_act(q, "attention", "q");
  detail::check_act(k, "attention", "k");
  detail::check_act(v, "attention", "v");
  detail::check_same_device(q, k, "attention", "k");
  detail::check_same_device(q, v, "attention", "v");
  ops::rules::attention(q, k, v, mask);
  ERNIE_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), "attention: q, k, v dtypes differ");
  ERNIE_CHECK(q.dim(1) < INT32_MAX && k.dim(1) < INT32_MAX && q.dim(2) < 65536, "attention: sizes too large");
  Tensor out = Tensor::empty(q.shape(), q.dtype(), q.device());
  if (out.numel() == 0) return out;
  if (mask.segments.empty()) {
    attend(q, k, v, out, scale, mask);
    return out;
  }
  int64_t at = 0;  // packed segments: one call each, on views of its rows
  for (int64_t L : mask.segments) {
    Tensor o = out.narrow_seq(at, L);
    attend(q.narrow_seq(at, L), k.narrow_seq(at, L), v.narrow_seq(at, L), o, scale, {});
    at += L;
  }
  return out;
}

bool attention_fp8_supported(const Tensor& qkv) {
  return qkv.device().is_cuda() && attn::wgmma_supported(128, false, 1.f, detail::dev(qkv));
}

namespace {
// The fp8 kernel on x, writing `out` (shaped like x.q; a view into a packed result).
void attend_fp8(const ops::Qkv8& x, float scale, const ops::AttentionMask& mask, Tensor& out) {
  const int dev = detail::dev(x.q);
  ERNIE_CHECK(attn::wgmma_supported(128, false, scale, dev),
              "attention_fp8: needs a compute-capability 9.0 GPU (Hopper) and a positive scale");
  for (const Tensor* t : {&x.q, &x.k, &x.vt})
    ERNIE_CHECK(aligned16(t->raw()), "attention_fp8: inputs must be 16-byte aligned");
  const int64_t B = x.q.dim(0), S = x.q.dim(1), H = x.q.dim(2);
  ERNIE_CHECK(S < INT32_MAX - 32 && H < 65536, "attention_fp8: sizes too large");
  if (out.numel() == 0) return;
  const int64_t tiles = x.v_scale.dim(2);
  for (int64_t b0 = 0; b0 < B; b0 += attn::kMaxBatch) {
    const int nb = int(std::min<int64_t>(attn::kMaxBatch, B - b0));
    attn::Params p{};
    p.q = x.q.data<uint8_t>() + b0 * S * H * 128;
    p.k = x.k.data<uint8_t>() + b0 * S * H * 128;
    p.v = x.vt.data<uint8_t>() + b0 * H * 128 * x.vt.dim(3);
    p.v_scale = x.v_scale.data<float>() + b0 * H * tiles;
    p.o = static_cast<char*>(out.raw()) + size_t(b0 * S * H * 128) * dtype_size(out.dtype());
    p.o_f32 = out.dtype() == DType::F32;
    p.B = nb;
    p.Sq = p.Sk = int(S), p.Hq = p.Hkv = int(H), p.D = 128;
    p.vt_len = int(x.vt.dim(3));
    p.scale = scale;
    for (int i = 0; i < nb; ++i) p.kv_len[i] = int(mask.kv_len.empty() ? S : mask.kv_len[size_t(b0 + i)]);
    attn::flash_wgmma_fp8(p, stream(dev));
  }
}
}  // namespace

Tensor attention_fp8(const ops::Qkv8& x, float scale, const ops::AttentionMask& mask, DType out_dtype) {
  Tensor out = Tensor::empty(x.q.shape(), out_dtype, x.q.device());
  attend_fp8(x, scale, mask, out);
  return out;
}

Tensor attention_fp8(const std::vector<ops::Qkv8>& segments, float scale, DType out_dtype) {
  int64_t S = 0;
  for (const ops::Qkv8& x : segments) S += x.q.dim(1);
  const Tensor& q0 = segments[0].q;
  Tensor out = Tensor::empty({1, S, q0.dim(2), 128}, out_dtype, q0.device());
  int64_t at = 0;
  for (const ops::Qkv8& x : segments) {
    Tensor o = out.narrow_seq(at, x.q.dim(1));
    attend_fp8(x, scale, {}, o);
    at += x.q.dim(1);
  }
  return out;
}

bool qkv_rope_attention_supported(const Tensor& qkv, int64_t heads_q, int64_t heads_kv, const Tensor& k_cache,
                                  const Tensor& v_cache, int64_t pos) {
  if (!qkv.defined() || !k_cache.defined() || !v_cache.defined() || k_cache.ndim() != 4 || heads_kv <= 0 ||
      heads_q <= 0 || heads_q > 65535 || forced("mma") || forced("simple") || forced("gemm"))
    return false;
  const int64_t D = k_cache.dim(3);
  return (qkv.dtype() == DType::BF16 || qkv.dtype() == DType::F32) && qkv.device().is_cuda() &&
         qkv.numel() == (heads_q + 2 * heads_kv) * D && D % 2 == 0 && k_cache.dim(0) == 1 &&
         k_cache.dim(2) == heads_kv && v_cache.shape() == k_cache.shape() && k_cache.dtype() == qkv.dtype() &&
         v_cache.dtype() == qkv.dtype() && k_cache.device() == qkv.device() && v_cache.device() == qkv.device() &&
         pos >= 0 && pos < k_cache.dim(1) && pos < INT32_MAX &&
         attn::decode_supported(1, int(heads_q), int(heads_kv), int(D));
}

Tensor qkv_rope_attention(const Tensor& qkv, int64_t heads_q, int64_t heads_kv, const Tensor& cos_q,
                          const Tensor& sin_q, const Tensor& cos_k, const Tensor& sin_k, const Tensor& k_cache,
                          const Tensor& v_cache, int64_t pos, float scale) {
  ERNIE_CHECK(qkv_rope_attention_supported(qkv, heads_q, heads_kv, k_cache, v_cache, pos),
              "qkv_rope_attention: not the one-kernel case (ask qkv_rope_attention_supported first)");
  const int64_t D = k_cache.dim(3);
  for (const Tensor* t : {&cos_q, &sin_q, &cos_k, &sin_k}) {
    detail::check_same_device(qkv, *t, "qkv_rope_attention", "table");
    ERNIE_CHECK(t->dtype() == DType::F32 && t->numel() == D, "qkv_rope_attention: cos/sin tables must be F32 [",
                std::to_string(D), "] for one position, got ", shape_str(t->shape()));
  }
  Tensor out = Tensor::empty({1, 1, heads_q, D}, qkv.dtype(), qkv.device());
  Tensor workspace = Tensor::empty({0}, DType::F32, qkv.device());
  const size_t row = size_t(heads_kv * D) * dtype_size(qkv.dtype());
  attn::Params p{};
  p.k = k_cache.raw(), p.v = v_cache.raw(), p.o = out.raw();  // q comes from qkv
  p.B = 1, p.Sq = 1, p.Sk = int(pos + 1), p.Hq = int(heads_q), p.Hkv = int(heads_kv), p.D = int(D);
  p.scale = scale;
  p.causal = true, p.q_offset = pos, p.stable_keys = pos;
  p.qkv = qkv.raw();
  p.cos_q = cos_q.data<float>(), p.sin_q = sin_q.data<float>(), p.cos_k = cos_k.data<float>(), p.sin_k = sin_k.data<float>();
  p.k_row = static_cast<char*>(k_cache.raw()) + size_t(pos) * row;
  p.v_row = static_cast<char*>(v_cache.raw()) + size_t(pos) * row;
  p.kv_len[0] = int(pos + 1);
  attn::decode(p, qkv.dtype() == DType::BF16, workspace, stream(detail::dev(qkv)));
  return out;
}

}  // namespace ernie::cuda
