// CPU backend of the op set (ops.h): fp32 math, OpenMP threads, OpenBLAS GEMMs. The reference every
// other backend is tested against. Same signatures as ernie::ops; inputs already on the CPU.
#pragma once
#include "ops/ops.h"

namespace ernie::cpu {
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias);
Tensor linear_q(const Tensor& x, const Tensor& q, const Tensor& scale, const Tensor& bias);  // 8-bit weight
// x = fp8 codes [M, K] with row scales sx [M], q/scale an fp8 weight [N, K]: ops::linear(Weight, Weight, out,
// bias).
Tensor linear_fp8(const Tensor& x, const Tensor& sx, const Tensor& q, const Tensor& scale, const Tensor& bias,
                  DType out);
ops::Weight quantize(const Tensor& x, DType q);
ops::Weight quantize_static(const Tensor& x, DType q, const Tensor& scale);  // ops::quantize(x, q, scale)
float max_abs(const Tensor& x);
// q · scale (scale undefined: q, a float) as F32, then `out`.
Tensor dequantize(const Tensor& q, const Tensor& scale, DType out = DType::F32);
// GGML blocks (ops::Weight::ggml_blocks, checked by ops::dequantize) as [rows, cols] F32, then `out`.
Tensor dequantize_blocks(const Tensor& raw, int ggml_type, int64_t cols, DType out);
// The stored values of n 8-bit codes (I8 or F8_E4M3) as f32, unscaled.
void convert_quantized(DType q, const void* in, float* out, size_t n);
Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps);
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps);
Tensor group_norm(const Tensor& x, int groups, const Tensor& weight, const Tensor& bias, float eps, bool silu,
                  ops::Layout layout = ops::Layout::NCHW);
Tensor silu(const Tensor& x);
Tensor gelu(const Tensor& x);
Tensor add(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& x, float s);
Tensor clamp(const Tensor& x, float lo, float hi);
Tensor swiglu(const Tensor& gate, const Tensor& up);
Tensor geglu(const Tensor& gate, const Tensor& up);
Tensor modulate(const Tensor& x, const Tensor& shift, const Tensor& scale);
Tensor gated_residual(const Tensor& residual, const Tensor& gate, const Tensor& y);
ops::Weight rms_norm_modulate_fp8(const Tensor& x, const Tensor& weight, float eps, const Tensor& shift,
                                  const Tensor& scale, const Tensor& static_scale);
ops::Weight geglu_fp8(const Tensor& gate, const Tensor& up, const Tensor& static_scale);
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin);
// Fused decode-step ops (fused.cpp): the compositions ops.h names.
ops::SumNorm add_rms_norm(const Tensor& x, const Tensor& y, const Tensor& weight, float eps);
ops::Qkv qkv_rope(const Tensor& qkv, int64_t heads_q, int64_t heads_kv, const Tensor& cos_q, const Tensor& sin_q,
                  const Tensor& cos_k, const Tensor& sin_k, const Tensor& k_out, const Tensor& v_out);
Tensor linear_swiglu(const Tensor& x, const ops::Weight& gate_up);
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, const ops::AttentionMask& mask);
// fp8 attention (attention_fp8.cpp): qkv_norm_rope_fp8's codes from qkv_norm_rope's float result, and
// ops::attention_fp8.
ops::Qkv8 fp8_attention_inputs(const ops::Qkv& x);
Tensor attention_fp8(const ops::Qkv8& x, float scale, const ops::AttentionMask& mask, DType out);
Tensor attention_fp8(const std::vector<ops::Qkv8>& segments, float scale, DType out);
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, int stride, int pad,
              ops::Layout layout = ops::Layout::NCHW);
Tensor pad2d(const Tensor& x, int left, int right, int top, int bottom);
Tensor upsample_nearest2x(const Tensor& x, ops::Layout layout = ops::Layout::NCHW);
Tensor permute(const Tensor& x, const std::vector<int>& dims);
Tensor concat(const std::vector<Tensor>& xs, int dim);
Tensor slice(const Tensor& x, int dim, int64_t start, int64_t len);
Tensor embedding(const Tensor& table, const std::vector<int64_t>& ids);
Tensor cast(const Tensor& x, DType dtype);
std::vector<int64_t> argmax(const Tensor& x);  // argmax.cpp / argmax.cu

void set_threads(int n);  // OpenMP and OpenBLAS threads; 0 = all cores
}  // namespace ernie::cpu
