// attention: checks, then the split-key decode kernel (up to 4 query rows), the Hopper wgmma kernel (bf16,
// head_dim 128, not causal, sm_90), the mma.sync flash kernel (bf16, head_dim 16/32/64/128) or the simple kernel (F32, or any other head_dim <= 256). Batches beyond kMaxBatch run in slices (kv_len travels by value).
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
}  // namespace

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, const ops::AttentionMask& mask) {
  detail::check_act(q, "attention", "q");
  detail::check_act(k, "attention", "k");
  detail::check_act(v, "attention", "v");
  detail::check_same_device(q, k, "attention", "k");
  detail::check_same_device(q, v, "attention", "v");
  ops::rules::attention(q, k, v, mask);
  ERNIE_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), "attention: q, k, v dtypes differ");
  const int64_t B = q.dim(0), Sq = q.dim(1), Hq = q.dim(2), D = q.dim(3), Sk = k.dim(1), Hkv = k.dim(2);
  ERNIE_CHECK(Sq < INT32_MAX && Sk < INT32_MAX && Hq < 65536, "attention: sizes too large");
  Tensor out = Tensor::empty(q.shape(), q.dtype(), q.device());
  if (out.numel() == 0) return out;
  cudaStream_t st = stream(detail::dev(q));
  const bool bf16 = q.dtype() == DType::BF16;
  const bool flash = bf16 && attn::flash_supported(int(D)) && aligned16(q.raw()) && aligned16(k.raw()) &&
                     aligned16(v.raw()) && !forced("simple") && !forced("gemm");
  // Long sequences without the flash kernel (f32, or head_dim > 128) and heads wider than the simple
  // kernel's 256 go through cuBLASLt.
  if (!flash && (D > 256 || forced("gemm") || (!forced("simple") && Sq * Sk >= (int64_t(1) << 20)))) {
    attn::gemm_path(q, k, v, out, scale, mask);
    return out;
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
  return out;
}

}  // namespace ernie::cuda
