// The DiT's fused elementwise ops (ops.h "fused"): rms_norm + AdaLN modulate in one pass, and the fused
// QKV projection's split + per-head RMSNorm + rotate-half RoPE in one pass. Each matches the composition
// of the unfused ops except that nothing is rounded to the activation type in between.
#include "ops/cuda/common.h"
#include "ops/cuda/cuda_ops.h"

namespace ernie::cuda {

namespace {

constexpr int kWarps = 8;

// One warp per row of x [rows, C] (16-byte packs): y = (x · rsqrt(mean(x²) + eps) · w) · (1 + scale[b]) +
// shift[b], b = row / seq; ss / sc are the pack strides of shift / scale rows (0: one row for all).
template <class T>
__global__ void rms_norm_modulate_kernel(const Pack<T>* __restrict__ x, VecF w, const Pack<T>* __restrict__ shift,
                                         const Pack<T>* __restrict__ scale, Pack<T>* __restrict__ y, int64_t rows,
                                         int cp, int64_t seq, int64_t ss, int64_t sc, float eps) {
  constexpr int P = kPack<T>;
  const int64_t row = blockIdx.x * int64_t(kWarps) + threadIdx.y;
  if (row >= rows) return;
  const int64_t b = row / seq;
  const Pack<T>* xr = x + row * cp;
  Pack<T>* yr = y + row * cp;
  const float inv = row_inv_rms(xr, cp, eps);
  for (int i = threadIdx.x; i < cp; i += 32) {
    const Pack<T> a = xr[i], sh = shift[b * ss + i], s = scale[b * sc + i];
    Pack<T> r;
#pragma unroll
    for (int e = 0; e < P; ++e) {
      const float n = to_f(a.v[e]) * inv * (w.defined() ? w[i * P + e] : 1.f);
      r.v[e] = from_f<T>(n * (1.f + to_f(s.v[e])) + to_f(sh.v[e]));
    }
    yr[i] = r;
  }
}

// Four consecutive elements, loaded and stored as one access.
template <class T>
struct alignas(4 * sizeof(T)) Quad {
  T v[4];
};

// One warp per (token row, part q/k/v, head) of qkv [rows, 3, heads, 128]; lane l holds elements 4l..4l+3,
// so the rotate-half partner (d ± 64) of each is in lane l ^ 16. Tables cos/sin [B or 1, S, 128] F32.
template <class T>
__global__ void qkv_norm_rope_kernel(const Quad<T>* __restrict__ qkv, VecF norm_q, VecF norm_k,
                                     const float* __restrict__ cs, const float* __restrict__ sn, Quad<T>* __restrict__ q,
                                     Quad<T>* __restrict__ k, Quad<T>* __restrict__ v, int64_t units, int heads,
                                     int64_t seq, int64_t table_b, float eps) {
  const int64_t unit = blockIdx.x * int64_t(kWarps) + threadIdx.y;
  if (unit >= units) return;
  const int lane = threadIdx.x, head = int(unit % heads), part = int(unit / heads % 3);
  const int64_t row = unit / (3 * int64_t(heads));
  const Quad<T> in = qkv[unit * 32 + lane];
  const int64_t out = (row * heads + head) * 32 + lane;
  if (part == 2) {
    v[out] = in;
    return;
  }
  const VecF w = part == 0 ? norm_q : norm_k;
  float x[4], ss = 0.f;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    x[e] = to_f(in.v[e]);
    ss += x[e] * x[e];
  }
  const float inv = rsqrtf(warp_sum(ss) / 128.f + eps);
  if (w.defined())
#pragma unroll
    for (int e = 0; e < 4; ++e) x[e] *= inv * w[lane * 4 + e];
  const int64_t t = (row / seq) * table_b + (row % seq) * 128 + lane * 4;
  Quad<T> r;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float other = __shfl_xor_sync(0xffffffffu, x[e], 16);
    r.v[e] = from_f<T>(x[e] * cs[t + e] + (lane < 16 ? -other : other) * sn[t + e]);
  }
  (part == 0 ? q : k)[out] = r;
}

}  // namespace

Tensor rms_norm_modulate(const Tensor& x, const Tensor& weight, float eps, const Tensor& shift, const Tensor& scale) {
  detail::check_act(x, "rms_norm_modulate", "x");
  const int64_t ss = detail::row_vector_stride(x, shift, "rms_norm_modulate", "shift");
  const int64_t sc = detail::row_vector_stride(x, scale, "rms_norm_modulate", "scale");
  const int64_t c = x.dim(-1), rows = c ? x.numel() / c : 0;
  if (weight.defined()) {
    detail::check_same_device(x, weight, "rms_norm_modulate", "weight");
    ERNIE_CHECK(weight.numel() == c, "rms_norm_modulate: weight ", shape_str(weight.shape()), " should have ",
                std::to_string(c), " elements");
  }
  const int P = x.dtype() == DType::F32 ? kPack<float> : kPack<__nv_bfloat16>;
  if (rows == 0 || c % P != 0 || shift.dtype() != x.dtype() || scale.dtype() != x.dtype() || !aligned16(x.raw()) ||
      !aligned16(shift.raw()) || !aligned16(scale.raw()))
    return modulate(rms_norm(x, weight, eps), shift, scale);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  cudaStream_t st = stream(detail::dev(x));
  const dim3 block(32, kWarps);
  const unsigned grid = unsigned((rows + kWarps - 1) / kWarps);
  ERNIE_DISPATCH_ACT(x.dtype(), "rms_norm_modulate", {
    rms_norm_modulate_kernel<T><<<grid, block, 0, st>>>(x.data<Pack<T>>(), vec(weight), shift.data<Pack<T>>(),
                                                        scale.data<Pack<T>>(), y.data<Pack<T>>(), rows, int(c / P),
                                                        rows / x.dim(0), ss / P, sc / P, eps);
  });
  ERNIE_CUDA_LAUNCH("rms_norm_modulate");
  return y;
}

bool qkv_norm_rope_supported(const Tensor& qkv, int64_t heads, const Tensor& norm_q, const Tensor& norm_k,
                             const Tensor& cos, const Tensor& sin) {
  const int64_t D = qkv.dim(2) / (3 * heads);
  auto norm_ok = [&](const Tensor& w) { return !w.defined() || (w.numel() == D && w.device() == qkv.device()); };
  return D == 128 && (qkv.dtype() == DType::F32 || qkv.dtype() == DType::BF16) && aligned16(qkv.raw()) &&
         norm_ok(norm_q) && norm_ok(norm_k) && cos.dtype() == DType::F32 && sin.dtype() == DType::F32 &&
         cos.device() == qkv.device() && sin.device() == qkv.device();
}

ops::Qkv qkv_norm_rope(const Tensor& qkv, int64_t heads, const Tensor& norm_q, const Tensor& norm_k, float eps,
                       const Tensor& cos, const Tensor& sin) {
  detail::check_act(qkv, "qkv_norm_rope", "qkv");
  const int64_t B = qkv.dim(0), S = qkv.dim(1), D = 128;
  const Shape out{B, S, heads, D};
  ERNIE_CHECK(cos.ndim() == 3 && cos.shape() == sin.shape() && (cos.dim(0) == B || cos.dim(0) == 1) &&
                  cos.dim(1) == S && cos.dim(2) == D,
              "qkv_norm_rope: cos/sin ", shape_str(cos.shape()), " must be [", std::to_string(B), " or 1, ",
              std::to_string(S), ", ", std::to_string(D), "]");
  ops::Qkv r{Tensor::empty(out, qkv.dtype(), qkv.device()), Tensor::empty(out, qkv.dtype(), qkv.device()),
             Tensor::empty(out, qkv.dtype(), qkv.device())};
  const int64_t units = B * S * 3 * heads;
  if (units == 0) return r;
  cudaStream_t st = stream(detail::dev(qkv));
  const int64_t table_b = cos.dim(0) == 1 ? 0 : S * D;
  ERNIE_DISPATCH_ACT(qkv.dtype(), "qkv_norm_rope", {
    qkv_norm_rope_kernel<T><<<unsigned((units + kWarps - 1) / kWarps), dim3(32, kWarps), 0, st>>>(
        qkv.data<Quad<T>>(), vec(norm_q), vec(norm_k), cos.data<float>(), sin.data<float>(), r.q.data<Quad<T>>(),
        r.k.data<Quad<T>>(), r.v.data<Quad<T>>(), units, int(heads), S, table_b, eps);
  });
  ERNIE_CUDA_LAUNCH("qkv_norm_rope");
  return r;
}

}  // namespace ernie::cuda
