// The CPU twins of the decode-step fused ops: each is the composition its ops.h entry names, in fp32.
#include <cstring>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/cpu_util.h"
#include "ops/shape_rules.h"

namespace ernie::cpu {

ops::SumNorm add_rms_norm(const Tensor& x, const Tensor& y, const Tensor& weight, float eps) {
  detail::check_act(x, "add_rms_norm", "x");
  detail::check_act(y, "add_rms_norm", "y");
  ops::rules::add_rms_norm(x, y);
  Tensor sum = add(x, y);
  return {sum, rms_norm(sum, weight, eps)};
}

ops::Qkv qkv_rope(const Tensor& qkv, int64_t heads_q, int64_t heads_kv, const Tensor& cos_q, const Tensor& sin_q,
                  const Tensor& cos_k, const Tensor& sin_k, const Tensor& k_out, const Tensor& v_out) {
  detail::check_act(qkv, "qkv_rope", "qkv");
  const int64_t D = ops::rules::qkv_rope(qkv, heads_q, heads_kv, cos_q, sin_q, cos_k, sin_k, k_out, v_out);
  const int64_t B = qkv.dim(0), S = qkv.dim(1);
  auto part = [&](int64_t head0, int64_t heads) {
    return slice(qkv, 2, head0 * D, heads * D).reshape({B, S, heads, D});
  };
  // Into the caller's tensor when given (its storage is written through the view).
  auto place = [](Tensor t, const Tensor& out) {
    if (!out.defined()) return t;
    detail::check_act(out, "qkv_rope", "output");
    std::memcpy(out.raw(), t.raw(), t.nbytes());
    return out;
  };
  Tensor q = rope(part(0, heads_q), cos_q, sin_q);
  Tensor k = place(rope(part(heads_q, heads_kv), cos_k, sin_k), k_out);
  Tensor v = place(part(heads_q + heads_kv, heads_kv), v_out);
  return {q, k, v};
}

Tensor linear_swiglu(const Tensor& x, const ops::Weight& gate_up) {
  detail::check_act(x, "linear_swiglu", "x");
  const int64_t I = ops::rules::linear_swiglu(x, gate_up.w);
  const Tensor h = gate_up.quantized() ? linear_q(x, gate_up.w, gate_up.scale, {}) : linear(x, gate_up.w, {});
  const int last = int(h.ndim()) - 1;
  return swiglu(slice(h, last, 0, I), slice(h, last, I, I));
}

}  // namespace ernie::cpu
