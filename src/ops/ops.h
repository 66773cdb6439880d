// The op set. Model code is written once against these functions; each dispatches on the device of its
// inputs to the CPU backend (ops/cpu/: the reference, fp32 math) or the CUDA backend (ops/cuda/: bf16
// storage, fp32 accumulation, fused kernels). Activations are F32 on the CPU and F32 or BF16 on CUDA;
// weights may be F32, BF16 or F16 anywhere (the CPU converts them on the fly).
//
// Layout conventions: row-major, contiguous. Token sequences are [B, S, C]; attention heads are
// [B, S, heads, head_dim]; images are NCHW unless an op takes a Layout (below). "Per-row" vectors ([B, C])
// broadcast over S.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ernie::ops {

// ---- GEMM -------------------------------------------------------------------------------------------
// A linear layer's weight [out, in]: a float tensor (F32, BF16, F16; `scale` undefined), or 8-bit with one
// F32 scale per output row, w[o, :] ≈ q[o, :] · scale[o]: I8 (|q| <= 127) or F8_E4M3 (|q| <= 448).
// Where an image keeps its channels: NCHW [B, C, H, W], or channels-last NHWC [B, H, W, C] (the VAE
// decoder's activations: cuDNN's tensor-core convolutions read and write it without conversions).
enum class Layout { NCHW, NHWC };

struct Weight {
  Tensor w, scale;
  // fp8 weights only: a static activation scale (F32 [1], from `convert --calibrate`). When defined, linear()
  // quantizes its input with this one scale for every row instead of a dynamic scale per row.
  Tensor input_scale;
  // GGML blocks (a GGUF weight kept quantized): `w` holds the stored bytes as U8 [rows, row bytes], `ggml` the
  // GGML type id (core/ggml_types.h) and `cols` the row length in elements. linear() and dequantize() expand
  // them to a float [rows, cols] as they run (on CUDA, right before the GEMM), so memory holds the blocks.
  int ggml = -1;
  int64_t cols = 0;
  Weight() = default;
  Weight(Tensor t) : w(std::move(t)) {}  // NOLINT(google-explicit-constructor): a float weight
  Weight(Tensor q, Tensor s) : w(std::move(q)), scale(std::move(s)) {}
  static Weight ggml_blocks(Tensor raw, int type, int64_t cols) {
    Weight b(std::move(raw));
    b.ggml = type, b.cols = cols;
    return b;
  }
  bool defined() const { return w.defined(); }
  bool quantized() const { return scale.defined(); }  // 8-bit with row scales (not GGML blocks)
  bool blocks() const { return ggml >= 0; }
  Shape shape() const { return blocks() ? Shape{w.dim(0), cols} : w.shape(); }  // the logical [out, in]
  size_t nbytes() const {
    size_t n = 0;
    for (const Tensor* t : {&w, &scale, &input_scale}) n += t->defined() ? t->nbytes() : 0;
    return n;
  }
};

// y[..., out] = x[..., in] · w[out, in]ᵀ (+ bias[out]).
// I8 weights: weight-only quantization (W8A16), y = (x · qᵀ) · scale[out].
// F8_E4M3 weights: x is quantized too, per row (token) with a dynamic scale, as quantize() does (W8A8),
// y = (qx · qᵀ) · sx[row] · scale[out]; on Hopper with BF16 activations this runs on the fp8 tensor cores,
// elsewhere as a float GEMM on the same quantized values.
Tensor linear(const Tensor& x, const Weight& w, const Tensor& bias = {});

// The same fp8 GEMM on an activation already quantized per row: x = F8_E4M3 codes [rows, in] with their F32
// scale [rows] (as quantize(x2d, F8_E4M3) or the *_fp8 ops below give it), w F8_E4M3:
// y[rows, out] = (qx · qᵀ) · sx[row] · scale[out] (+ bias[out]) in `out` (F32, or BF16 on CUDA).
// linear(x, w) with fp8 w is linear(quantize(x2d, F8_E4M3), w, x.dtype()) reshaped; quantizing once this
// way feeds several GEMMs that read the same activation.
Tensor linear(const Weight& x, const Weight& w, DType out, const Tensor& bias = {});

// residual[B, S, out] + gate · linear(x, w), gate [1, out] or [B, out] per row as gated_residual takes it: the
// DiT's gated residual after a projection. On CUDA with fp8 weights and one gate for every row, the fp8
// GEMM does it (the gate folded into the weight's row scales, the residual added as C; y rounded once);
// elsewhere the composition gated_residual(residual, gate, linear(x, w)).
Tensor linear_gated_residual(const Tensor& residual, const Tensor& gate, const Tensor& x, const Weight& w);
// The same on a pre-quantized activation (x as ops::linear(Weight, Weight, ...) takes it, [rows, in] with
// rows · out = residual.numel()), the result in the residual's dtype: the DiT's linear_fc2 on geglu_fp8's codes.
Tensor linear_gated_residual(const Tensor& residual, const Tensor& gate, const Weight& x, const Weight& w);

// Row-wise symmetric quantization of a float [rows, cols] tensor (a weight, or activations) to `q` = I8 or
// F8_E4M3, on its own device: scale[r] = max|x[r, :]| / qmax (qmax 127 or 448; 1 for an all-zero row),
// q = x · (1 / scale) rounded to nearest even (I8 clamped to ±127, F8 saturating, as f32_to_fp8_e4m3).
Weight quantize(const Tensor& x, DType q);
// The same with one given scale for every row (a static activation scale: F32 [1] on x's device, finite and
// positive): scale[r] = that value, q = x · (1 / scale) rounded and clamped as above.
Weight quantize(const Tensor& x, DType q, const Tensor& scale);
// max |x| over every element as a float (0 for an empty tensor, NaN when x holds a NaN): calibration's
// activation ranges.
float max_abs(const Tensor& x);
// q · scale as `out` (F32 or BF16) [rows, cols] on the weight's device (a float weight: converted; GGML
// blocks: decoded, after their geometry is checked against the type).
Tensor dequantize(const Weight& w, DType out = DType::F32);

// ---- normalisation (over the last dim) ----------------------------------------------------------------
// x * rsqrt(mean(x²) + eps) * weight; `weight` may be undefined (no affine).
Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps);
// (x - mean) * rsqrt(var + eps) * weight + bias; weight/bias may be undefined.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps);
// GroupNorm over [B, C, H, W] (NHWC: [B, H, W, C]; any number of spatial dims) with per-channel affine;
// `silu` fuses the activation after it.
Tensor group_norm(const Tensor& x, int groups, const Tensor& weight, const Tensor& bias, float eps, bool silu = false,
                  Layout layout = Layout::NCHW);

// ---- elementwise -----------------------------------------------------------------------------------------
Tensor silu(const Tensor& x);
Tensor gelu(const Tensor& x);  // exact (erf) GELU, as torch's default
Tensor add(const Tensor& a, const Tensor& b);          // same shape
Tensor mul(const Tensor& a, const Tensor& b);          // same shape
Tensor scale(const Tensor& x, float s);                // x * s
Tensor clamp(const Tensor& x, float lo, float hi);     // min(max(x, lo), hi); NaN stays NaN
Tensor swiglu(const Tensor& gate, const Tensor& up);   // silu(gate) * up
Tensor geglu(const Tensor& gate, const Tensor& up);    // gelu(gate) * up
// AdaLN: x[B, S, C] * (1 + scale[B, C]) + shift[B, C].
Tensor modulate(const Tensor& x, const Tensor& shift, const Tensor& scale);
// residual[B, S, C] + gate[B, C] * y[B, S, C].
Tensor gated_residual(const Tensor& residual, const Tensor& gate, const Tensor& y);

// ---- fused (each equals the composition named; CUDA runs one kernel where it pays) ------------------------
// modulate(rms_norm(x, weight, eps), shift, scale): the DiT's AdaLN input.
Tensor rms_norm_modulate(const Tensor& x, const Tensor& weight, float eps, const Tensor& shift, const Tensor& scale);
// Producers of an fp8 GEMM's input (see linear above): the op's result, viewed as [rows = numel / C, C],
// quantized per row to F8_E4M3 in the same pass, bit for bit quantize(result.reshape({rows, C}), F8_E4M3)
// (on CUDA the result is rounded to the activation dtype first, as the unfused op stores it). With
// `static_scale` (F32 [1] on the op's device, finite and positive: convert --calibrate) every row takes that
// scale instead: quantize(result, F8_E4M3, static_scale) bit for bit.
Weight rms_norm_modulate_fp8(const Tensor& x, const Tensor& weight, float eps, const Tensor& shift,
                             const Tensor& scale, const Tensor& static_scale = {});
Weight geglu_fp8(const Tensor& gate, const Tensor& up, const Tensor& static_scale = {});
// Attention inputs from one fused projection qkv [B, S, 3·heads·D] (the q, k, v blocks in that order):
// q and k get a per-head rms_norm (weight [D], none when undefined) then rope (cos/sin [B or 1, S, D] F32);
// v is copied. Each result is [B, S, heads, D].
struct Qkv {
  Tensor q, k, v;
};
Qkv qkv_norm_rope(const Tensor& qkv, int64_t heads, const Tensor& norm_q, const Tensor& norm_k, float eps,
                  const Tensor& cos, const Tensor& sin);
// The residual add before a pre-norm sublayer: sum = x + y (same shape, stored in the activation dtype) and
// normed = rms_norm(sum, weight, eps) of that stored sum, in one pass.
struct SumNorm {
  Tensor sum, normed;
};
SumNorm add_rms_norm(const Tensor& x, const Tensor& y, const Tensor& weight, float eps);
// GQA attention inputs from one fused projection qkv [B, S, (heads_q + 2·heads_kv)·D] (the q, k, v blocks in
// that order): q = rope(q, cos_q, sin_q), k = rope(k, cos_k, sin_k), v copied (tables as rope's). Results
// [B, S, heads, D]. k_out / v_out, when defined (contiguous [B, S, heads_kv, D] in qkv's dtype and device, e.g.
// rows of a KV cache), receive k and v and are returned as them; otherwise k and v are new tensors.
Qkv qkv_rope(const Tensor& qkv, int64_t heads_q, int64_t heads_kv, const Tensor& cos_q, const Tensor& sin_q,
             const Tensor& cos_k, const Tensor& sin_k, const Tensor& k_out = {}, const Tensor& v_out = {});
// swiglu(gate, up) of a stacked gate|up projection w [2·I, in] (gate rows then up rows): [..., I], each half
// rounded to x's dtype as linear(x, w) would store it. CUDA computes it inside the GEMV for a few rows.
Tensor linear_swiglu(const Tensor& x, const Weight& gate_up);
// A decoder layer's residual add, the RMSNorm after it and the projection that reads the normed states:
// sum = x + y (y undefined: x alone), out = linear(rms_norm(sum)·norm_weight, w), or linear_swiglu of it
// with `swiglu` (w a stacked gate|up). The normed states are not returned. On CUDA for one row (decoding)
// one kernel (the GEMV normalises its input first), elsewhere add_rms_norm (rms_norm) then the projection.
struct SumOut {
  Tensor sum, out;
};
SumOut add_rms_norm_linear(const Tensor& x, const Tensor& y, const Tensor& norm_weight, float eps, const Weight& w,
                           bool swiglu = false);

// ---- positional ---------------------------------------------------------------------------------------------
// Rotate-half RoPE on x[B, S, heads, D] with full-width tables cos/sin [B or 1, S, D] (F32):
//   out[i] = x[i]·cos[i] + rot(x)[i]·sin[i],  rot(x) = concat(-x[D/2:], x[:D/2]).
// The caller fills the tables, so any angle layout (Mistral's repeated halves, the DiT's interleaved
// pairs) uses the same op.
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin);

// ---- attention ------------------------------------------------------------------------------------------------
struct AttentionMask {
  bool causal = false;          // query i (at absolute position q_offset + i) sees keys <= its position
  int64_t q_offset = 0;         // position of the first query (KV-cached decoding)
  std::vector<int64_t> kv_len;  // per batch row: only keys [0, kv_len[b]) are valid; empty = all valid
  // Sequences packed into one batch row (B = 1, Sq = Sk, not causal, no kv_len): consecutive runs of these
  // lengths, summing to S, each attending within itself (block-diagonal; "varlen" attention). Empty: none.
  std::vector<int64_t> segments;
  // Keys [0, stable_keys) of k and v were written before the op just ahead of this one (a KV cache's earlier
  // rows): a GPU kernel may start reading them while that op still runs. A hint; 0 promises nothing.
  int64_t stable_keys = 0;
};
// softmax(q·kᵀ·scale + mask)·v. q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D] with Hq % Hkv == 0 (GQA).
// Returns [B, Sq, Hq, D].
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, const AttentionMask& mask = {});
// Decoding one token at position `pos`: qkv_rope of its fused projection qkv [1, 1, (heads_q + 2·heads_kv)·D]
// with the new key and value written into row `pos` of the caches k_cache / v_cache [1, capacity, heads_kv, D],
// then causal attention of its query over cache rows [0, pos]. Returns [1, 1, heads_q, D]. On CUDA one kernel
// (the decode attention ropes q and the new row itself), elsewhere qkv_rope and attention.
Tensor qkv_rope_attention(const Tensor& qkv, int64_t heads_q, int64_t heads_kv, const Tensor& cos_q,
                          const Tensor& sin_q, const Tensor& cos_k, const Tensor& sin_k, const Tensor& k_cache,
                          const Tensor& v_cache, int64_t pos, float scale);

// ---- fp8 attention (the DiT's joint attention on Hopper's fp8 tensor cores) ----------------------------
// qkv_norm_rope's result in fp8 for attention_fp8 (head_dim 128 only):
//  - q, k: F8_E4M3 codes [B, S, heads, 128] of the normed and roped values, unscaled (a per-head rms-normed
//    row is bounded by sqrt(128)·max|norm weight|; beyond ±448 saturates);
//  - vt: F8_E4M3 [B, heads, 128, S32] (S32 = S rounded up to 32, zero past S): v transposed per head, each
//    128-key tile t of a head divided by its own v_scale [B, heads, ceil(S/128)] (F32: max|tile| / 448, the
//    smallest normal float for an all-zero tile); within every 32 keys, position p holds key
//    fp8_key_order(p) (the order in which the tensor cores' fp8 operand fragment holds P, see
//    attention_wgmma.cu).
struct Qkv8 {
  Tensor q, k, vt, v_scale;
};
constexpr int fp8_key_order(int p) { return 16 * (p / 16) + 8 * ((p % 4) / 2) + 2 * ((p % 16) / 4) + p % 2; }
constexpr int kFp8AttentionTile = 128;  // keys per v_scale
// Whether attention_fp8 runs on qkv's device for this head_dim (CPU: its reference; CUDA: compute
// capability 9.0).
bool attention_fp8_supported(const Tensor& qkv, int64_t head_dim);
Qkv8 qkv_norm_rope_fp8(const Tensor& qkv, int64_t heads, const Tensor& norm_q, const Tensor& norm_k, float eps,
                       const Tensor& cos, const Tensor& sin);
// softmax(q·kᵀ·scale + mask)·v of qkv_norm_rope_fp8's codes, the FlashAttention way over 128-key tiles: a
// reference m (moved to the tile's maximum of scale·log2(e)·s only when that passes it by more than 8) and
// the sum l in fp32; tile t's P·v as (P·f_t)·vt_t with P = 2^(scale·log2(e)·s − m), f_t = max(v_scale_t /
// max_t v_scale_t, 2^-20) (folded into the exponent) and P·f_t rounded to e4m3, so O is accumulated in units
// of the largest tile scale. Not causal; mask.kv_len as attention's. Returns [B, S, heads, 128] in `out`
// (F32 or BF16).
Tensor attention_fp8(const Qkv8& x, float scale, const AttentionMask& mask, DType out);
// Packed rows (AttentionMask::segments) in fp8: `segments` holds each segment's inputs (qkv_norm_rope_fp8 of
// its rows, batch 1 each); their attention_fp8 results, one after another, in one [1, ΣS, heads, 128] tensor.
Tensor attention_fp8(const std::vector<Qkv8>& segments, float scale, DType out);

// ---- convolution and resampling ------------------------------------------------------------------------------
// 2-D convolution with symmetric zero padding `pad`. NCHW: x [B, I, H, W], weight [O, I, kh, kw] ->
// [B, O, Ho, Wo]. NHWC: x [B, H, W, I], weight [O, kh, kw, I] (conv_weight_nhwc of the NCHW weight) ->
// [B, Ho, Wo, O].
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, int stride, int pad, Layout layout = Layout::NCHW);
// An NCHW convolution weight [O, I, kh, kw] as conv2d's NHWC layout takes it: [O, kh, kw, I].
Tensor conv_weight_nhwc(const Tensor& w);
// Zero-pad H and W: (left, right, top, bottom).
Tensor pad2d(const Tensor& x, int left, int right, int top, int bottom);
// [B, C, H, W] -> [B, C, 2H, 2W]; NHWC: [B, H, W, C] -> [B, 2H, 2W, C].
Tensor upsample_nearest2x(const Tensor& x, Layout layout = Layout::NCHW);

// ---- layout -------------------------------------------------------------------------------------------------------
// Generic permutation of up to 6 dims (like torch.permute(...).contiguous()).
Tensor permute(const Tensor& x, const std::vector<int>& dims);
// Concatenate along dim `dim`; all other dims equal.
Tensor concat(const std::vector<Tensor>& xs, int dim);
// Slice [start, start+len) along dim `dim` (copy).
Tensor slice(const Tensor& x, int dim, int64_t start, int64_t len);
// Rows of table[V, C] picked by ids (I64 or I32 on the host): [n, C], in the table's device/activation dtype.
Tensor embedding(const Tensor& table, const std::vector<int64_t>& ids, Device device, DType act);
// The same with the ids in an I64 [n] tensor on the table's device (a CUDA table; e.g. argmax_indices' result):
// nothing waits for the host; an id outside the vocabulary gives a zero row.
Tensor embedding(const Tensor& table, const Tensor& ids, DType act);

// ---- reductions ---------------------------------------------------------------------------------------------------
// torch.randn(n, generator=torch.Generator("cuda").manual_seed(seed)) drawn on a CUDA device by torch's own
// scheme (curand's Philox and Box-Muller, this GPU's grid): bit for bit torch's on the same GPU, [n] in dtype
// (f32 or bf16) on `device`. CUDA only; the host twin is engine/rng/torch_cuda_rng.h.
Tensor torch_cuda_randn(int64_t n, uint64_t seed, DType dtype, Device device);

// Index of the largest value in each row of a float tensor [..., n] (the first one on ties, as torch.argmax), on
// the host: greedy decoding brings back one id instead of the row. Throws Error when a row holds NaN.
std::vector<int64_t> argmax(const Tensor& x);
// The same as an I64 [rows] tensor on x's device, without waiting for it: on CUDA -1 marks a row holding NaN
// (the CPU throws as argmax does).
Tensor argmax_indices(const Tensor& x);

// ---- conversions ------------------------------------------------------------------------------------------------
// Cast a float tensor to `dtype` on its own device.
Tensor cast(const Tensor& x, DType dtype);

// ---- devices: what is there, threads, memory (ops/device_queries.cpp) -------------------------------------------
// The layers above ops/ ask these, never a backend: without the CUDA backend there are no CUDA devices.
bool cuda_built();                    // this build has the CUDA backend
int cuda_device_count();              // visible CUDA devices (0 without the backend, a driver or a device)
std::string device_name(Device d);    // "NVIDIA H200", "cpu"
// Why the CUDA backend cannot run on `d` (compute capability below 8.0, or no code in this binary for it);
// "" when it can, and for the CPU.
std::string unusable_reason(Device d);
// The kernel each op takes on `d` (doctor's "kernels" list): attention, the GEMMs per weight format, the
// decode GEMV, launch overlap, convolutions. Empty for the CPU.
struct KernelPath {
  std::string op, path;
};
std::vector<KernelPath> kernel_paths(Device d);
void set_threads(int n);              // CPU threads for OpenMP and OpenBLAS; 0 = all cores
void synchronize(Device d);           // the host waits for the device's work (CPU: no-op)
struct MemoryStats {
  size_t in_use_bytes = 0, peak_in_use_bytes = 0;      // held by live tensors (size-class rounded)
  size_t reserved_bytes = 0, peak_reserved_bytes = 0;  // taken from the driver (live + cached)
};
MemoryStats memory_stats(Device d);   // the allocator's counts (CPU: zeros)
void reset_peak_memory(Device d);     // peaks back to the current values (CPU: no-op)
// What allocations on a CUDA device can still get: the driver's free memory plus cached free blocks, within
// the memory limit. CPU: 0 (nothing is planned against host memory).
size_t available_bytes(Device d);
// Gives the allocator's cached free blocks on `device` back to the driver (after freeing a model). CPU: no-op.
void release_cached_memory(Device device);
// Keeps the memory the allocator takes from the driver on `device` under `bytes` (--max-vram): past it the
// cache is given back first, then allocation throws OutOfMemory. 0 = no limit. CPU: no-op.
void set_memory_limit(Device device, size_t bytes);

// ---- weight streaming ------------------------------------------------------------------------------------------

// Weight streaming (CUDA only; the CPU has nothing to stream, and these throw there). Every op runs on its
// device's compute stream; uploads run on the device's copy stream; StreamEvents order the two.
enum class Stream { Compute, Copy };
// Page-locked host memory of `bytes` ([bytes] U8 on the host), so uploads from it overlap compute.
Tensor pinned_empty(size_t bytes, Device device);
// dst (on a CUDA device) <- src (on the host; pinned to be asynchronous), equal byte sizes, enqueued on the
// device's copy stream; returns at once.
void upload_async(const Tensor& dst, const Tensor& src);
// dst (on the host; pinned to be asynchronous) <- src (on a CUDA device), equal byte sizes, enqueued on the
// device's compute stream after the ops before it; returns at once (a StreamEvent says when it is done).
void download_async(const Tensor& dst, const Tensor& src);
class StreamEvent {
 public:
  explicit StreamEvent(Device device);
  ~StreamEvent();
  StreamEvent(const StreamEvent&) = delete;
  StreamEvent& operator=(const StreamEvent&) = delete;
  void record(Stream s);     // marks the point stream `s` has reached
  void wait(Stream s) const; // stream `s` waits for the last recorded point (never recorded: no wait)
  void synchronize() const;  // the host waits for it
 private:
  Device device_;
  [[maybe_unused]] void* event_ = nullptr;  // a cudaEvent_t (unused in a CPU-only build)
};

}  // namespace ernie::ops
