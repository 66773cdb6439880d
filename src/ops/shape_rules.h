// Argument rules and output shapes of the ops, shared by the backends (cpu/, cuda/): each backend checks
// devices and dtypes itself, then these, so that both accept the same inputs and reject the others with
// the same messages.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/ops.h"

namespace ernie::ops::rules {

// dim in [-ndim, ndim) -> [0, ndim); throws naming `op` and the shape.
int norm_dim(int dim, int ndim, const char* op, const Shape& s);

// permute(x, dims) as a 6-d gather: the output shape, and the output sizes padded to 6 dims with leading
// 1s with the input stride (elements) of each of them. Throws unless dims permute 0..ndim-1 (ndim <= 6).
struct Permute6 {
  Shape out_shape;
  std::array<int64_t, 6> out{1, 1, 1, 1, 1, 1}, stride{};
};
Permute6 permute6(const Tensor& x, const std::vector<int>& dims);

// concat / slice along a dim as strided row copies: the normalised dim, the output shape, `outer` rows
// (the product of the sizes before dim) and `inner` bytes per index of dim.
struct RowCopy {
  int dim = 0;
  Shape out_shape;
  int64_t outer = 1, inner = 1;
};
// xs non-empty, all of one rank, dtype and device, and equal sizes outside dim.
RowCopy concat(const std::vector<Tensor>& xs, int dim);
// [start, start + len) inside dim.
RowCopy slice(const Tensor& x, int dim, int64_t start, int64_t len);

// x [..., H, W] -> [..., H + top + bottom, W + left + right]; padding non-negative.
Shape pad2d(const Tensor& x, int left, int right, int top, int bottom);
// x [..., H, W] -> [..., 2H, 2W]; NHWC: x [B, H, W, C] -> [B, 2H, 2W, C].
Shape upsample_nearest2x(const Tensor& x, Layout layout = Layout::NCHW);

// x [B, I, H, W], weight [O, I, kh, kw], stride >= 1, pad >= 0, kernel within the padded input;
// returns [B, O, Ho, Wo]. NHWC: x [B, H, W, I], weight [O, kh, kw, I], returns [B, Ho, Wo, O].
Shape conv2d(const Tensor& x, const Tensor& w, int stride, int pad, Layout layout = Layout::NCHW);

// group_norm's x and groups: [B, C, ...] (NHWC: [B, ..., C]) with C divisible into `groups`.
void group_norm(const Tensor& x, int groups, Layout layout);

// x [B, S, heads, head_dim] with head_dim even; cos and sin [B or 1, S, head_dim] alike.
void rope(const Tensor& x, const Tensor& cos, const Tensor& sin);

// x and y of one shape (not a scalar).
void add_rms_norm(const Tensor& x, const Tensor& y);
// qkv [B, S, (heads_q + 2·heads_kv)·D] with heads positive and D even; the tables of q and of k as rope's for
// [B, S, heads, D]; k_out / v_out undefined or [B, S, heads_kv, D] in qkv's dtype. Returns D.
int64_t qkv_rope(const Tensor& qkv, int64_t heads_q, int64_t heads_kv, const Tensor& cos_q, const Tensor& sin_q,
                 const Tensor& cos_k, const Tensor& sin_k, const Tensor& k_out, const Tensor& v_out);
// x [..., in] and a stacked gate|up weight [2·I, in]. Returns I.
int64_t linear_swiglu(const Tensor& x, const Tensor& gate_up);

// q [B, Sq, Hq, D], k = v [B, Sk, Hkv, D] with Hq a multiple of Hkv; mask.kv_len empty or B entries in
// [0, Sk]; mask.q_offset >= 0.
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask);

// qkv_norm_rope_fp8's result (ops.h Qkv8) for attention_fp8: q = k F8_E4M3 [B, S, heads, 128], vt F8_E4M3
// [B, heads, 128, S rounded up to 32], v_scale F32 [B, heads, ceil(S / 128)], all on q's device; mask not causal,
// no q_offset, kv_len as attention's.
void attention_fp8(const Qkv8& x, const AttentionMask& mask);

// An 8-bit weight: q [rows, cols] I8 or F8_E4M3 with scale [rows] F32 on q's device.
void quantized_weight(const Tensor& q, const Tensor& scale, const char* op);
// x [B, ..., C] with a per-row vector v [B or 1, C] (any shape with those leading/trailing sizes): the stride
// (in elements) between rows of v, C, or 0 when it broadcasts over B. `what` names v in the error.
int64_t row_vector_stride(const Tensor& x, const Tensor& v, const char* op, const char* what);
// linear on a pre-quantized activation: x / sx and q / scale each an 8-bit tensor with its row scales, both
// F8_E4M3.
void fp8_linear_operands(const Tensor& x, const Tensor& sx, const Tensor& q, const Tensor& scale);
// quantize(x, q): x a 2-D float tensor, q I8 or F8_E4M3; returns qmax (127 or 448).
float quantize(const Tensor& x, DType q);
// A static activation scale: F32 with one element.
void static_scale(const Tensor& scale);

}  // namespace ernie::ops::rules
