// CUDA backend of the op set (ops.h): bf16 (or f32) activations, fp32 accumulation, fused kernels.
// Same signatures as ernie::ops; inputs already on the GPU. Only compiled with ERNIE_HAVE_CUDA.
#pragma once
#include <string>
#include <vector>

#include "ops/ops.h"

namespace ernie::cuda {
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias);
Tensor linear_q(const Tensor& x, const Tensor& q, const Tensor& scale, const Tensor& bias);  // 8-bit weight
// x = fp8 codes [M, K] with row scales sx [M], q/scale an fp8 weight [N, K]: ops::linear(Weight, Weight, out,
// bias).
Tensor linear_fp8(const Tensor& x, const Tensor& sx, const Tensor& q, const Tensor& scale, const Tensor& bias,
                  DType out);
// residual + gate · linear(x, w (8-bit when `scale` is defined)), as the GEMM's epilogue where it can.
Tensor linear_gated_residual(const Tensor& residual, const Tensor& gate, const Tensor& x, const Tensor& w,
                             const Tensor& scale);
// The same on an activation already quantized to fp8 (codes x [M, K], row scales sx), fp8 weight q/scale.
Tensor linear_fp8_gated_residual(const Tensor& residual, const Tensor& gate, const Tensor& x, const Tensor& sx,
                                 const Tensor& q, const Tensor& scale);
ops::Weight quantize(const Tensor& x, DType q);
ops::Weight quantize_static(const Tensor& x, DType q, const Tensor& scale);  // ops::quantize(x, q, scale)
float max_abs(const Tensor& x);
Tensor dequantize(const Tensor& q, const Tensor& scale, DType out = DType::F32);
// GGML blocks (ops::Weight::ggml_blocks, checked by ops::dequantize) as [rows, cols] F32, then `out`.
Tensor dequantize_blocks(const Tensor& raw, int ggml_type, int64_t cols, DType out);
// Whether linear_q runs fp8 weights on the fp8 tensor cores (cuBLASLt, compute capability >= 8.9, and not
// turned off with ERNIE_FP8_GEMM=0); otherwise a float GEMM on the same quantized values.
bool fp8_gemm_supported(int device);
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
Tensor rms_norm_modulate(const Tensor& x, const Tensor& weight, float eps, const Tensor& shift, const Tensor& scale);
ops::Weight rms_norm_modulate_fp8(const Tensor& x, const Tensor& weight, float eps, const Tensor& shift,
                                  const Tensor& scale, const Tensor& static_scale);
ops::Weight geglu_fp8(const Tensor& gate, const Tensor& up, const Tensor& static_scale);
// The fused kernel takes head_dim 128, F32/BF16, aligned rows; other shapes use the composition.
bool qkv_norm_rope_supported(const Tensor& qkv, int64_t heads, const Tensor& norm_q, const Tensor& norm_k,
                             const Tensor& cos, const Tensor& sin);
ops::Qkv qkv_norm_rope(const Tensor& qkv, int64_t heads, const Tensor& norm_q, const Tensor& norm_k, float eps,
                       const Tensor& cos, const Tensor& sin);
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin);
// Fused decode-step ops: add_rms_norm.cu, qkv_rope.cu, gemv.cu (linear_swiglu).
ops::SumNorm add_rms_norm(const Tensor& x, const Tensor& y, const Tensor& weight, float eps);
ops::Qkv qkv_rope(const Tensor& qkv, int64_t heads_q, int64_t heads_kv, const Tensor& cos_q, const Tensor& sin_q,
                  const Tensor& cos_k, const Tensor& sin_k, const Tensor& k_out, const Tensor& v_out);
Tensor linear_swiglu(const Tensor& x, const ops::Weight& gate_up);
// ops::add_rms_norm_linear in one kernel (gemv.cu): one row, a bf16/f32 weight of rows in whole 2 KiB chunks,
// Hopper.
bool add_rms_norm_linear_supported(const Tensor& x, const Tensor& y, const Tensor& norm_weight, const ops::Weight& w,
                                   bool swiglu);
ops::SumOut add_rms_norm_linear(const Tensor& x, const Tensor& y, const Tensor& norm_weight, float eps,
                                const ops::Weight& w, bool swiglu);
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, const ops::AttentionMask& mask);
// fp8 attention (ops.h): the inputs from the fused projection (fused_dit.cu), and the Hopper kernel
// (attention_wgmma.cu) on compute capability 9.0.
bool attention_fp8_supported(const Tensor& qkv);
ops::Qkv8 qkv_norm_rope_fp8(const Tensor& qkv, int64_t heads, const Tensor& norm_q, const Tensor& norm_k, float eps,
                            const Tensor& cos, const Tensor& sin);
Tensor attention_fp8(const ops::Qkv8& x, float scale, const ops::AttentionMask& mask, DType out);
Tensor attention_fp8(const std::vector<ops::Qkv8>& segments, float scale, DType out);
// ops::qkv_rope_attention in the one-kernel case (attention.cpp): bf16 or f32, one token, the decode kernel's
// shapes, contiguous caches.
bool qkv_rope_attention_supported(const Tensor& qkv, int64_t heads_q, int64_t heads_kv, const Tensor& k_cache,
                                  const Tensor& v_cache, int64_t pos);
Tensor qkv_rope_attention(const Tensor& qkv, int64_t heads_q, int64_t heads_kv, const Tensor& cos_q,
                          const Tensor& sin_q, const Tensor& cos_k, const Tensor& sin_k, const Tensor& k_cache,
                          const Tensor& v_cache, int64_t pos, float scale);
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, int stride, int pad,
              ops::Layout layout = ops::Layout::NCHW);
Tensor pad2d(const Tensor& x, int left, int right, int top, int bottom);
Tensor upsample_nearest2x(const Tensor& x, ops::Layout layout = ops::Layout::NCHW);
Tensor permute(const Tensor& x, const std::vector<int>& dims);
Tensor concat(const std::vector<Tensor>& xs, int dim);
Tensor slice(const Tensor& x, int dim, int64_t start, int64_t len);
Tensor embedding(const Tensor& table, const std::vector<int64_t>& ids, Device device, DType act);
Tensor embedding(const Tensor& table, const Tensor& ids, DType act);  // ids I64 [n] on the table's device
Tensor cast(const Tensor& x, DType dtype);
std::vector<int64_t> argmax(const Tensor& x);  // argmax.cpp / argmax.cu
Tensor torch_cuda_randn(int64_t n, uint64_t seed, DType dtype, Device device);  // torch_randn.cu: [n] on device
Tensor argmax_indices(const Tensor& x);  // I64 [rows] on x's device, -1 for a row holding NaN; no wait

// ---- device management (device.cpp) ------------------------------------------------------------------
struct MemoryStats {
  size_t in_use_bytes = 0, peak_in_use_bytes = 0;      // held by live tensors (size-class rounded)
  size_t reserved_bytes = 0, peak_reserved_bytes = 0;  // taken from the driver (live + cached)
};
MemoryStats memory_stats(int device);
void reset_peak_memory(int device);
void empty_cache(int device);  // returns cached free blocks to the driver
void set_memory_limit(int device, size_t bytes);  // cap on reserved bytes (0: none); see ops::set_memory_limit
// What allocations can still get: the driver's free memory + cached free blocks, within the memory limit.
size_t available_bytes(int device);
void synchronize(int device);  // waits for the device's stream
void set_poison_allocations(bool on);  // tests: new device memory is filled with NaN bytes
int device_count();            // 0 when no driver or no device
int can_access_peer(int from, int to);  // cudaDeviceCanAccessPeer: 1 or 0; -1 when CUDA cannot say
std::string device_name(int device);
// Why the backend cannot run on `device` (compute capability below 8.0, or no code in this binary for it);
// "" when it can. Using such a device throws this message.
constexpr int kMinComputeCapability = 80;
std::string unusable_reason(int device);
// The kernel each op takes on `device`, as doctor shows it (ops/cuda/kernel_paths.cpp).
std::vector<ops::KernelPath> kernel_paths(int device);
// Whether cuBLASLt has the fp8 GEMM with per-row and per-column scales (outer-vector scale mode) on
// `device`; without it linear_fp8 runs a tensor-wise fp8 GEMM and scales the product after.
bool fp8_row_scales_supported(int device);

// ---- weight streaming (streaming.cpp): a copy stream per device next to the compute stream ------------
void* pinned_alloc(size_t bytes, int device);  // page-locked host memory; throws OutOfMemory
void pinned_free(void* p);                      // never throws
void upload_async(void* dst, const void* src, size_t bytes, int device);  // on the copy stream
void download_async(void* dst, const void* src, size_t bytes, int device);  // on the compute stream
void* event_create(int device);
void event_destroy(void* event, int device);    // never throws
void event_record(void* event, int device, bool copy_stream);
void event_wait(void* event, int device, bool copy_stream);
void event_synchronize(void* event);
}  // namespace ernie::cuda
