// Dispatch of the op set to the backend that holds the inputs.
#include "ops/ops.h"

#include <algorithm>

#include "core/error.h"
#include "io/gguf_quants.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/shape_rules.h"
#ifdef ERNIE_HAVE_CUDA
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "ops/cuda/cuda_ops.h"

namespace ernie::ops {
namespace {
// ERNIE_PROFILE_HOST=1: host time spent queuing each CUDA op (no synchronisation), printed at exit. Says
// whether the host or the GPU limits a run (bench's denoise_enqueue_s against denoise_s).
struct HostProfile {
  std::mutex mu;
  std::map<std::string, std::pair<double, long>> ops;
  const bool on = std::getenv("ERNIE_PROFILE_HOST") != nullptr;
  ~HostProfile() {
    for (auto& [name, v] : ops)
      std::fprintf(stderr, "host %-20s %10.3f ms %8ld calls %8.2f us/call\n", name.c_str(), v.first * 1e3, v.second,
                   v.first / double(v.second) * 1e6);
  }
};
HostProfile& host_profile() {
  static HostProfile p;
  return p;
}
struct HostTimer {
  const char* name;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  ~HostTimer() {
    HostProfile& p = host_profile();
    std::lock_guard<std::mutex> lk(p.mu);
    auto& v = p.ops[name];
    v.first += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++v.second;
  }
};
// Runs a CUDA op, timed when ERNIE_PROFILE_HOST is set.
template <class F>
decltype(auto) on_cuda(const char* name, F&& f) {
  if (!host_profile().on) return f();
  HostTimer t{name};
  return f();
}
}  // namespace
}  // namespace ernie::ops

#define ERNIE_OP(fn, dev, ...)                                                         \
  do {                                                                                 \
    if ((dev).is_cpu()) return cpu::fn(__VA_ARGS__);                                   \
    return on_cuda(#fn, [&]() -> decltype(auto) { return cuda::fn(__VA_ARGS__); });  \
  } while (0)
#else
#define ERNIE_OP(fn, dev, ...)                                                     \
  do {                                                                             \
    ERNIE_CHECK((dev).is_cpu(), #fn ": this build has no CUDA backend");           \
    return cpu::fn(__VA_ARGS__);                                                   \
  } while (0)
#endif

namespace ernie::ops {

namespace {
// x [..., in] quantized with w's static activation scale, as linear(Weight, Weight, ...) takes it.
Weight quantize_input(const Tensor& x, const Weight& w) {
  ERNIE_CHECK(w.w.dtype() == DType::F8_E4M3, "linear: a static activation scale needs an fp8 weight, got ",
              dtype_name(w.w.dtype()));
  ERNIE_CHECK(x.defined() && x.ndim() >= 1, "linear: x is undefined or a scalar");
  const int64_t K = x.dim(-1);
  return quantize(x.reshape({K ? x.numel() / K : 0, K}), DType::F8_E4M3, w.input_scale);
}
// A GGML-block weight as the float weight a GEMM on x reads (BF16 for BF16 activations, else F32).
Weight expanded(const Weight& w, const Tensor& x) {
  return Weight(dequantize(w, x.defined() && x.dtype() == DType::BF16 ? DType::BF16 : DType::F32));
}
}  // namespace

Tensor linear(const Tensor& x, const Weight& w, const Tensor& bias) {
  if (w.blocks()) return linear(x, expanded(w, x), bias);
  if (!w.quantized()) ERNIE_OP(linear, x.device(), x, w.w, bias);
  if (w.input_scale.defined()) {
    Shape ys = x.shape();
    ys.back() = w.w.dim(0);
    return linear(quantize_input(x, w), w, x.dtype(), bias).reshape(ys);
  }
  ERNIE_OP(linear_q, x.device(), x, w.w, w.scale, bias);
}
Tensor linear(const Weight& x, const Weight& w, DType out, const Tensor& bias) {
  ERNIE_CHECK(x.quantized(), "linear: x is a float tensor here; a pre-quantized activation needs its row scales ",
              "(use quantize(x, F8_E4M3), or linear(x, w) for a float x)");
  ERNIE_CHECK(w.quantized(), "linear: a pre-quantized activation needs an fp8 weight, got a float one");
  ERNIE_OP(linear_fp8, x.w.device(), x.w, x.scale, w.w, w.scale, bias, out);
}
Tensor linear_gated_residual(const Tensor& residual, const Tensor& gate, const Tensor& x, const Weight& w) {
  if (w.blocks()) return linear_gated_residual(residual, gate, x, expanded(w, x));
  if (w.quantized() && w.input_scale.defined()) return linear_gated_residual(residual, gate, quantize_input(x, w), w);
#ifdef ERNIE_HAVE_CUDA
  if (x.device().is_cuda())
    return on_cuda("linear_gated_residual", [&] { return cuda::linear_gated_residual(residual, gate, x, w.w, w.scale); });
#endif
  return gated_residual(residual, gate, linear(x, w));
}
Tensor linear_gated_residual(const Tensor& residual, const Tensor& gate, const Weight& x, const Weight& w) {
  ERNIE_CHECK(x.quantized() && w.quantized(), "linear_gated_residual: a pre-quantized x needs its row scales and ",
              "an fp8 weight");
  ERNIE_CHECK(residual.defined(), "linear_gated_residual: residual is undefined");
#ifdef ERNIE_HAVE_CUDA
  if (x.w.device().is_cuda())
    return on_cuda("linear_gated_residual",
                   [&] { return cuda::linear_fp8_gated_residual(residual, gate, x.w, x.scale, w.w, w.scale); });
#endif
  const Tensor y = linear(x, w, residual.dtype());
  ERNIE_CHECK(y.numel() == residual.numel(), "linear_gated_residual: linear gives ", shape_str(y.shape()),
              " for residual ", shape_str(residual.shape()));
  return gated_residual(residual, gate, y.reshape(residual.shape()));
}
Weight quantize(const Tensor& x, DType q) {
  ERNIE_CHECK(x.defined(), "quantize: input is undefined");
  ERNIE_OP(quantize, x.device(), x, q);
}
Weight quantize(const Tensor& x, DType q, const Tensor& scale) {
  ERNIE_CHECK(x.defined(), "quantize: input is undefined");
  ERNIE_OP(quantize_static, x.device(), x, q, scale);
}
float max_abs(const Tensor& x) {
  ERNIE_CHECK(x.defined(), "max_abs: input is undefined");
  ERNIE_OP(max_abs, x.device(), x);
}
Tensor dequantize(const Weight& w, DType out) {
  ERNIE_CHECK(w.defined(), "dequantize: weight is undefined");
  ERNIE_CHECK(out == DType::F32 || out == DType::BF16, "dequantize: output must be F32 or BF16, not ", dtype_name(out));
  if (w.blocks()) {
    const GgmlType* t = ggml_type(uint32_t(w.ggml));
    ERNIE_CHECK(t && t->decode, "dequantize: GGML type ", std::to_string(w.ggml), " is not a block type this build reads");
    ERNIE_CHECK(w.w.dtype() == DType::U8 && w.w.ndim() == 2 && w.cols > 0 &&
                    w.cols % t->block == 0 && w.w.dim(1) == w.cols / t->block * int64_t(t->block_bytes),
                "dequantize: ", t->name, " blocks ", shape_str(w.w.shape()), " ", dtype_name(w.w.dtype()),
                " do not hold rows of ", std::to_string(w.cols), " elements");
    ERNIE_OP(dequantize_blocks, w.w.device(), w.w, w.ggml, w.cols, out);
  }
  ERNIE_OP(dequantize, w.w.device(), w.w, w.scale, out);
}
Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps) { ERNIE_OP(rms_norm, x.device(), x, weight, eps); }
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) {
  ERNIE_OP(layer_norm, x.device(), x, weight, bias, eps);
}
Tensor group_norm(const Tensor& x, int groups, const Tensor& weight, const Tensor& bias, float eps, bool silu,
                  Layout layout) {
  ERNIE_OP(group_norm, x.device(), x, groups, weight, bias, eps, silu, layout);
}
Tensor silu(const Tensor& x) { ERNIE_OP(silu, x.device(), x); }
Tensor gelu(const Tensor& x) { ERNIE_OP(gelu, x.device(), x); }
Tensor add(const Tensor& a, const Tensor& b) { ERNIE_OP(add, a.device(), a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { ERNIE_OP(mul, a.device(), a, b); }
Tensor scale(const Tensor& x, float s) { ERNIE_OP(scale, x.device(), x, s); }
Tensor clamp(const Tensor& x, float lo, float hi) { ERNIE_OP(clamp, x.device(), x, lo, hi); }
Tensor swiglu(const Tensor& gate, const Tensor& up) { ERNIE_OP(swiglu, gate.device(), gate, up); }
Tensor geglu(const Tensor& gate, const Tensor& up) { ERNIE_OP(geglu, gate.device(), gate, up); }
Tensor modulate(const Tensor& x, const Tensor& shift, const Tensor& scale) {
  ERNIE_OP(modulate, x.device(), x, shift, scale);
}
Tensor gated_residual(const Tensor& residual, const Tensor& gate, const Tensor& y) {
  ERNIE_OP(gated_residual, residual.device(), residual, gate, y);
}
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin) { ERNIE_OP(rope, x.device(), x, cos, sin); }

// The fused ops' reference: the composition itself (CPU, and CUDA shapes the fused kernels do not take).
namespace {
Qkv qkv_norm_rope_composed(const Tensor& qkv, int64_t heads, const Tensor& norm_q, const Tensor& norm_k, float eps,
                           const Tensor& cos, const Tensor& sin) {
  const int64_t B = qkv.dim(0), S = qkv.dim(1), HD = qkv.dim(2) / 3;
  const Tensor parts = qkv.reshape({B * S, 3, HD});
  auto part = [&](int i) { return slice(parts, 1, i, 1).reshape({B, S, heads, HD / heads}); };
  Tensor q = part(0), k = part(1);
  if (norm_q.defined()) q = rms_norm(q, norm_q, eps);
  if (norm_k.defined()) k = rms_norm(k, norm_k, eps);
  return {rope(q, cos, sin), rope(k, cos, sin), part(2)};
}
}  // namespace

Tensor rms_norm_modulate(const Tensor& x, const Tensor& weight, float eps, const Tensor& shift, const Tensor& scale) {
#ifdef ERNIE_HAVE_CUDA
  if (x.device().is_cuda())
    return on_cuda("rms_norm_modulate", [&] { return cuda::rms_norm_modulate(x, weight, eps, shift, scale); });
#endif
  return modulate(rms_norm(x, weight, eps), shift, scale);
}

Weight rms_norm_modulate_fp8(const Tensor& x, const Tensor& weight, float eps, const Tensor& shift,
                             const Tensor& scale, const Tensor& static_scale) {
  ERNIE_CHECK(x.defined(), "rms_norm_modulate_fp8: x is undefined");
  if (static_scale.defined()) rules::static_scale(static_scale);
  ERNIE_OP(rms_norm_modulate_fp8, x.device(), x, weight, eps, shift, scale, static_scale);
}
Weight geglu_fp8(const Tensor& gate, const Tensor& up, const Tensor& static_scale) {
  ERNIE_CHECK(gate.defined(), "geglu_fp8: gate is undefined");
  if (static_scale.defined()) rules::static_scale(static_scale);
  ERNIE_OP(geglu_fp8, gate.device(), gate, up, static_scale);
}

Qkv qkv_norm_rope(const Tensor& qkv, int64_t heads, const Tensor& norm_q, const Tensor& norm_k, float eps,
                  const Tensor& cos, const Tensor& sin) {
  ERNIE_CHECK(qkv.defined() && qkv.ndim() == 3 && heads > 0 && qkv.dim(2) % (3 * heads) == 0, "qkv_norm_rope: qkv ",
              shape_str(qkv.shape()), " is not [B, S, 3 * heads * head_dim] for ", std::to_string(heads), " heads");
#ifdef ERNIE_HAVE_CUDA
  if (qkv.device().is_cuda() && cuda::qkv_norm_rope_supported(qkv, heads, norm_q, norm_k, cos, sin))
    return on_cuda("qkv_norm_rope", [&] { return cuda::qkv_norm_rope(qkv, heads, norm_q, norm_k, eps, cos, sin); });
#endif
  return qkv_norm_rope_composed(qkv, heads, norm_q, norm_k, eps, cos, sin);
}
bool attention_fp8_supported(const Tensor& qkv, int64_t head_dim) {
  if (head_dim != 128 || !qkv.defined()) return false;
#ifdef ERNIE_HAVE_CUDA
  if (qkv.device().is_cuda()) return cuda::attention_fp8_supported(qkv);
#endif
  return qkv.device().is_cpu();
}
Qkv8 qkv_norm_rope_fp8(const Tensor& qkv, int64_t heads, const Tensor& norm_q, const Tensor& norm_k, float eps,
                       const Tensor& cos, const Tensor& sin) {
  ERNIE_CHECK(qkv.defined() && qkv.ndim() == 3 && heads > 0 && qkv.dim(2) == 3 * heads * 128,
              "qkv_norm_rope_fp8: qkv ", qkv.defined() ? shape_str(qkv.shape()) : std::string("undefined"),
              " is not [B, S, 3 * heads * 128] for ", std::to_string(heads), " heads");
#ifdef ERNIE_HAVE_CUDA
  if (qkv.device().is_cuda()) {
    ERNIE_CHECK(cuda::qkv_norm_rope_supported(qkv, heads, norm_q, norm_k, cos, sin),
                "qkv_norm_rope_fp8: needs F32/BF16 qkv 16-byte aligned, norm weights of 128 (or none) and F32 cos/sin "
                "tables, all on qkv's device");
    return on_cuda("qkv_norm_rope_fp8", [&] { return cuda::qkv_norm_rope_fp8(qkv, heads, norm_q, norm_k, eps, cos, sin); });
  }
#endif
  return cpu::fp8_attention_inputs(qkv_norm_rope_composed(qkv, heads, norm_q, norm_k, eps, cos, sin));
}
Tensor attention_fp8(const Qkv8& x, float scale, const AttentionMask& mask, DType out) {
  rules::attention_fp8(x, mask);
  ERNIE_CHECK(out == DType::F32 || out == DType::BF16, "attention_fp8: out must be F32 or BF16");
  ERNIE_OP(attention_fp8, x.q.device(), x, scale, mask, out);
}
Tensor attention_fp8(const std::vector<Qkv8>& segments, float scale, DType out) {
  ERNIE_CHECK(!segments.empty(), "attention_fp8: no packed segments");
  for (const Qkv8& x : segments) {
    rules::attention_fp8(x, {});
    ERNIE_CHECK(x.q.dim(0) == 1 && x.q.dim(2) == segments[0].q.dim(2) && x.q.device() == segments[0].q.device(),
                "attention_fp8: packed segments must be batch-1 inputs of the same heads on one device");
  }
  ERNIE_CHECK(out == DType::F32 || out == DType::BF16, "attention_fp8: out must be F32 or BF16");
  ERNIE_OP(attention_fp8, segments[0].q.device(), segments, scale, out);
}
SumNorm add_rms_norm(const Tensor& x, const Tensor& y, const Tensor& weight, float eps) {
  ERNIE_CHECK(x.defined(), "add_rms_norm: x is undefined");
  ERNIE_OP(add_rms_norm, x.device(), x, y, weight, eps);
}
Qkv qkv_rope(const Tensor& qkv, int64_t heads_q, int64_t heads_kv, const Tensor& cos_q, const Tensor& sin_q,
             const Tensor& cos_k, const Tensor& sin_k, const Tensor& k_out, const Tensor& v_out) {
  ERNIE_CHECK(qkv.defined(), "qkv_rope: qkv is undefined");
  ERNIE_OP(qkv_rope, qkv.device(), qkv, heads_q, heads_kv, cos_q, sin_q, cos_k, sin_k, k_out, v_out);
}
Tensor linear_swiglu(const Tensor& x, const Weight& gate_up) {
  ERNIE_CHECK(x.defined() && gate_up.defined(), "linear_swiglu: an input is undefined");
  if (gate_up.blocks()) return linear_swiglu(x, expanded(gate_up, x));
  ERNIE_OP(linear_swiglu, x.device(), x, gate_up);
}
SumOut add_rms_norm_linear(const Tensor& x, const Tensor& y, const Tensor& norm_weight, float eps, const Weight& w,
                           bool swiglu) {
  ERNIE_CHECK(x.defined() && w.defined(), "add_rms_norm_linear: an input is undefined");
  if (w.blocks()) return add_rms_norm_linear(x, y, norm_weight, eps, expanded(w, x), swiglu);
#ifdef ERNIE_HAVE_CUDA
  if (x.device().is_cuda() && cuda::add_rms_norm_linear_supported(x, y, norm_weight, w, swiglu))
    return on_cuda("add_rms_norm_linear", [&] { return cuda::add_rms_norm_linear(x, y, norm_weight, eps, w, swiglu); });
#endif
  SumOut r;
  Tensor normed;
  if (y.defined()) {
    SumNorm n = add_rms_norm(x, y, norm_weight, eps);
    r.sum = n.sum, normed = n.normed;
  } else {
    r.sum = x, normed = rms_norm(x, norm_weight, eps);
  }
  r.out = swiglu ? linear_swiglu(normed, w) : linear(normed, w);
  return r;
}
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, const AttentionMask& mask) {
  ERNIE_OP(attention, q.device(), q, k, v, scale, mask);
}
Tensor qkv_rope_attention(const Tensor& qkv, int64_t heads_q, int64_t heads_kv, const Tensor& cos_q,
                          const Tensor& sin_q, const Tensor& cos_k, const Tensor& sin_k, const Tensor& k_cache,
                          const Tensor& v_cache, int64_t pos, float scale) {
  ERNIE_CHECK(qkv.defined() && k_cache.defined() && v_cache.defined() && k_cache.ndim() == 4 &&
                  k_cache.dim(0) == 1 && v_cache.shape() == k_cache.shape() && pos >= 0 && pos < k_cache.dim(1),
              "qkv_rope_attention: caches ", k_cache.defined() ? shape_str(k_cache.shape()) : "undefined",
              " must be [1, capacity, heads_kv, D] (k and v alike) with position ", std::to_string(pos), " inside");
#ifdef ERNIE_HAVE_CUDA
  if (qkv.device().is_cuda() && cuda::qkv_rope_attention_supported(qkv, heads_q, heads_kv, k_cache, v_cache, pos))
    return on_cuda("qkv_rope_attention", [&] {
      return cuda::qkv_rope_attention(qkv, heads_q, heads_kv, cos_q, sin_q, cos_k, sin_k, k_cache, v_cache, pos, scale);
    });
#endif
  const Qkv a = qkv_rope(qkv, heads_q, heads_kv, cos_q, sin_q, cos_k, sin_k, k_cache.narrow_seq(pos, 1),
                         v_cache.narrow_seq(pos, 1));
  AttentionMask mask;
  mask.causal = true, mask.q_offset = pos, mask.stable_keys = pos;
  return attention(a.q, k_cache.narrow_seq(0, pos + 1), v_cache.narrow_seq(0, pos + 1), scale, mask);
}
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, int stride, int pad, Layout layout) {
  ERNIE_OP(conv2d, x.device(), x, w, bias, stride, pad, layout);
}
Tensor conv_weight_nhwc(const Tensor& w) {
  ERNIE_CHECK(w.defined() && w.ndim() == 4, "conv_weight_nhwc: weight ", w.defined() ? shape_str(w.shape()) : "undefined",
              " is not [O, I, kh, kw]");
  return permute(w, {0, 2, 3, 1});
}
Tensor pad2d(const Tensor& x, int left, int right, int top, int bottom) {
  ERNIE_OP(pad2d, x.device(), x, left, right, top, bottom);
}
Tensor upsample_nearest2x(const Tensor& x, Layout layout) { ERNIE_OP(upsample_nearest2x, x.device(), x, layout); }
Tensor permute(const Tensor& x, const std::vector<int>& dims) { ERNIE_OP(permute, x.device(), x, dims); }
Tensor concat(const std::vector<Tensor>& xs, int dim) {
  ERNIE_CHECK(!xs.empty(), "concat: no tensors");
  ERNIE_OP(concat, xs[0].device(), xs, dim);
}
Tensor slice(const Tensor& x, int dim, int64_t start, int64_t len) { ERNIE_OP(slice, x.device(), x, dim, start, len); }
Tensor embedding(const Tensor& table, const std::vector<int64_t>& ids, Device device, DType act) {
#ifdef ERNIE_HAVE_CUDA
  if (device.is_cuda()) return cuda::embedding(table, ids, device, act);
#endif
  ERNIE_CHECK(device.is_cpu(), "embedding: this build has no CUDA backend");
  ERNIE_CHECK(act == DType::F32, "embedding: the CPU backend computes in F32");
  return cpu::embedding(table, ids);
}
namespace {
void check_argmax_input(const Tensor& x) {
  ERNIE_CHECK(x.defined() && x.ndim() >= 1 && x.dim(-1) > 0, "argmax: x ",
              x.defined() ? shape_str(x.shape()) : "undefined", " has no values per row");
}
}  // namespace
std::vector<int64_t> argmax(const Tensor& x) {
  check_argmax_input(x);
  ERNIE_OP(argmax, x.device(), x);
}
Tensor torch_cuda_randn([[maybe_unused]] int64_t n, [[maybe_unused]] uint64_t seed, [[maybe_unused]] DType dtype,
                        Device device) {
#ifdef ERNIE_HAVE_CUDA
  if (device.is_cuda())
    return on_cuda("torch_cuda_randn", [&] { return cuda::torch_cuda_randn(n, seed, dtype, device); });
#endif
  fail("torch_cuda_randn: draws on a CUDA device, not ", device.str(), " (on the host: engine/rng/torch_cuda_rng.h)");
}
Tensor argmax_indices(const Tensor& x) {
  check_argmax_input(x);
#ifdef ERNIE_HAVE_CUDA
  if (x.device().is_cuda()) return on_cuda("argmax", [&] { return cuda::argmax_indices(x); });
#endif
  const std::vector<int64_t> best = cpu::argmax(x);
  Tensor t = Tensor::empty({int64_t(best.size())}, DType::I64);
  std::copy(best.begin(), best.end(), t.data<int64_t>());
  return t;
}
Tensor embedding(const Tensor& table, const Tensor& ids, DType act) {
  ERNIE_CHECK(table.defined() && ids.defined(), "embedding: an input is undefined");
#ifdef ERNIE_HAVE_CUDA
  if (table.device().is_cuda()) return on_cuda("embedding", [&] { return cuda::embedding(table, ids, act); });
#endif
  ERNIE_CHECK(ids.device().is_cpu() && ids.dtype() == DType::I64, "embedding: ids must be I64 on the table's device");
  return embedding(table, std::vector<int64_t>(ids.data<int64_t>(), ids.data<int64_t>() + ids.numel()), table.device(),
                   act);
}
Tensor cast(const Tensor& x, DType dtype) { ERNIE_OP(cast, x.device(), x, dtype); }

#ifdef ERNIE_HAVE_CUDA
namespace {
int cuda_index(Device d, const char* op) {
  ERNIE_CHECK(d.is_cuda(), op, ": weight streaming needs a CUDA device, not ", d.str());
  return d.index;
}
}  // namespace

Tensor pinned_empty(size_t bytes, Device device) {
  const int dev = cuda_index(device, "pinned_empty");
  void* p = cuda::pinned_alloc(bytes, dev);
  std::shared_ptr<const void> owner(p, [](const void* q) { cuda::pinned_free(const_cast<void*>(q)); });
  return Tensor::borrow(p, {int64_t(bytes)}, DType::U8, owner);
}
void upload_async(const Tensor& dst, const Tensor& src) {
  const int dev = cuda_index(dst.device(), "upload_async");
  ERNIE_CHECK(src.device().is_cpu(), "upload_async: the source is on ", src.device().str(), ", expected the host");
  ERNIE_CHECK(dst.nbytes() == src.nbytes(), "upload_async: ", std::to_string(src.nbytes()), " bytes into ",
              std::to_string(dst.nbytes()));
  cuda::upload_async(dst.raw(), src.raw(), src.nbytes(), dev);
}
void download_async(const Tensor& dst, const Tensor& src) {
  const int dev = cuda_index(src.device(), "download_async");
  ERNIE_CHECK(dst.device().is_cpu(), "download_async: the destination is on ", dst.device().str(), ", expected the host");
  ERNIE_CHECK(dst.nbytes() == src.nbytes(), "download_async: ", std::to_string(src.nbytes()), " bytes into ",
              std::to_string(dst.nbytes()));
  cuda::download_async(dst.raw(), src.raw(), src.nbytes(), dev);
}
StreamEvent::StreamEvent(Device device) : device_(device) {
  event_ = cuda::event_create(cuda_index(device, "StreamEvent"));
}
StreamEvent::~StreamEvent() { cuda::event_destroy(event_, device_.index); }
void StreamEvent::record(Stream s) { cuda::event_record(event_, device_.index, s == Stream::Copy); }
void StreamEvent::wait(Stream s) const { cuda::event_wait(event_, device_.index, s == Stream::Copy); }
void StreamEvent::synchronize() const { cuda::event_synchronize(event_); }
#else
namespace {
[[noreturn]] void no_streaming(const char* op) {
  fail(op, ": weight streaming needs the CUDA backend (this build has none; on the CPU weights stay in host memory)");
}
}  // namespace
Tensor pinned_empty(size_t, Device) { no_streaming("pinned_empty"); }
void upload_async(const Tensor&, const Tensor&) { no_streaming("upload_async"); }
void download_async(const Tensor&, const Tensor&) { no_streaming("download_async"); }
StreamEvent::StreamEvent(Device device) : device_(device) { no_streaming("StreamEvent"); }
StreamEvent::~StreamEvent() = default;
void StreamEvent::record(Stream) { no_streaming("StreamEvent::record"); }
void StreamEvent::wait(Stream) const { no_streaming("StreamEvent::wait"); }
void StreamEvent::synchronize() const { no_streaming("StreamEvent::synchronize"); }
#endif

}  // namespace ernie::ops
