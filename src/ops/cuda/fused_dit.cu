// The DiT's fused elementwise ops (ops.h "fused"): rms_norm + AdaLN modulate in one pass (also quantizing
// its result per row to fp8 for the next GEMM: rms_norm_modulate_fp8), and the fused QKV projection's split
// + per-head RMSNorm + rotate-half RoPE in one pass. Each matches the composition of the unfused ops except
// that nothing is rounded to the activation type in between.
#include <cfloat>
#include <type_traits>

#include "ops/cuda/common.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/row_block.cuh"

namespace ernie::cuda {

namespace {

constexpr int kWarps = 8;

// One block per row of x [rows, C] (16-byte packs, NP per thread held in registers; see row_block.cuh):
// y = (x · rsqrt(mean(x²) + eps) · w) · (1 + scale[b]) + shift[b], b = row / seq; ss / sc are the pack
// strides of shift / scale rows (0: one row for all); w null: no affine. kFp8: y (rounded to T, as stored
// by the plain variant) is quantized per row into q / qs instead of stored, so rms_norm_modulate_fp8 is
// quantize(rms_norm_modulate(...)) bit for bit (with `fixed`, quantize(..., *fixed)).
template <class T, int NP, bool kFp8>
__global__ void __launch_bounds__(kRowThreads) rms_norm_modulate_kernel(
    const Pack<T>* __restrict__ x, const Pack<T>* __restrict__ w, const Pack<T>* __restrict__ shift,
    const Pack<T>* __restrict__ scale, Pack<T>* __restrict__ y, Codes<T>* __restrict__ q, float* __restrict__ qs,
    const float* __restrict__ fixed, int cp, int64_t seq, int64_t ss, int64_t sc, float eps) {
  constexpr int P = kPack<T>;
  const int64_t row = blockIdx.x, b = row / seq;
  const Pack<T>* xr = x + row * cp;
  Pack<T> a[NP];
#pragma unroll
  for (int j = 0; j < NP; ++j)
    if (threadIdx.x + j * blockDim.x < cp) a[j] = xr[threadIdx.x + j * blockDim.x];
  float sq = 0.f;
#pragma unroll
  for (int j = 0; j < NP; ++j)
    if (threadIdx.x + j * blockDim.x < cp)
#pragma unroll
      for (int e = 0; e < P; ++e) sq += to_f(a[j].v[e]) * to_f(a[j].v[e]);
  const float inv = rsqrtf(block_reduce(sq, SumOp()) / float(cp * P) + eps);
#pragma unroll
  for (int j = 0; j < NP; ++j) {
    const int i = threadIdx.x + j * blockDim.x;
    if (i >= cp) continue;
    const Pack<T> sh = shift[b * ss + i], s = scale[b * sc + i];
    Pack<T> wv;
    if (w) wv = w[i];
    Pack<T> r;
#pragma unroll
    for (int e = 0; e < P; ++e) {
      const float n = to_f(a[j].v[e]) * inv * (w ? to_f(wv.v[e]) : 1.f);
      r.v[e] = from_f<T>(n * (1.f + to_f(s.v[e])) + to_f(sh.v[e]));
    }
    if constexpr (kFp8) a[j] = r;
    else y[row * cp + i] = r;
  }
  if constexpr (kFp8) store_fp8_row<T, NP>(a, row, cp, q, qs, fixed);
}

// One warp per (token row, part q/k/v, chunk of G accesses) of qkv [rows, 3, heads, 128] in 16-byte packs.
// A head is L = 128 / P lanes (16 for bf16, 32 for f32), so one access covers HA = 32 / L heads; lane l holds
// elements P·(l mod L) + [0, P) of its head, whose rotate-half partners (d ± 64) are in lane l ^ L/2. The
// lane's cos/sin (tables [B or 1, S, 128] F32) and norm weights are the same for every head: read once, and
// the G loads of a warp are in flight together.
// O: Pack<T> (stored in T), or Codes<T> (qkv_norm_rope_fp8: e4m3 codes of q and k, unscaled; v is left to
// v_tiles_fp8_kernel, so `parts` is 2).
template <class T, int G, class O>
__global__ void qkv_norm_rope_kernel(const Pack<T>* __restrict__ qkv, VecF norm_q, VecF norm_k,
                                     const float* __restrict__ cs, const float* __restrict__ sn,
                                     O* __restrict__ q, O* __restrict__ k, O* __restrict__ v, int64_t units,
                                     int parts, int heads, int chunks, int64_t seq, int64_t table_b, float eps) {
  constexpr int P = kPack<T>, L = 128 / P, HA = 32 / L;
  constexpr bool kFp8 = std::is_same_v<O, Codes<T>>;
  const int64_t unit = blockIdx.x * int64_t(kWarps) + threadIdx.y;
  if (unit >= units) return;  // whole warps only
  const int lane = threadIdx.x, p = lane % L, chunk = int(unit % chunks), part = int(unit / chunks % parts);
  const int64_t row = unit / (int64_t(parts) * chunks);
  const int h0 = chunk * G * HA + lane / L;
  const Pack<T>* src = qkv + (row * 3 + part) * int64_t(heads) * L;
  Pack<T> in[G];
#pragma unroll
  for (int j = 0; j < G; ++j) {
    const int h = h0 + j * HA;
    if (h < heads) in[j] = src[h * L + p];
    else in[j] = Pack<T>{};
  }
  O* dst = (part == 0 ? q : part == 1 ? k : v) + row * heads * L;
  if constexpr (!kFp8) {
    if (part == 2) {
#pragma unroll
      for (int j = 0; j < G; ++j)
        if (h0 + j * HA < heads) dst[(h0 + j * HA) * L + p] = in[j];
      return;
    }
  }
  const int64_t t = (row / seq) * table_b + (row % seq) * 128 + p * P;
  float c[P], s[P], w[P];
#pragma unroll
  for (int e = 0; e < P; e += 4) {
    const float4 c4 = *reinterpret_cast<const float4*>(cs + t + e), s4 = *reinterpret_cast<const float4*>(sn + t + e);
    c[e] = c4.x, c[e + 1] = c4.y, c[e + 2] = c4.z, c[e + 3] = c4.w;
    s[e] = s4.x, s[e + 1] = s4.y, s[e + 2] = s4.z, s[e + 3] = s4.w;
  }
  const VecF nw = part == 0 ? norm_q : norm_k;
  const bool norm = nw.defined();
#pragma unroll
  for (int e = 0; e < P; ++e) w[e] = norm ? nw[p * P + e] : 1.f;
#pragma unroll
  for (int j = 0; j < G; ++j) {
    float x[P], ss = 0.f;
#pragma unroll
    for (int e = 0; e < P; ++e) {
      x[e] = to_f(in[j].v[e]);
      ss += x[e] * x[e];
    }
    if (norm) {  // the head's L lanes are an aligned group: xor offsets below L stay inside it
#pragma unroll
      for (int o = L / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
      const float inv = rsqrtf(ss / 128.f + eps);
#pragma unroll
      for (int e = 0; e < P; ++e) x[e] = x[e] * inv * w[e];
    }
    O r;
#pragma unroll
    for (int e = 0; e < P; ++e) {
      const float other = __shfl_xor_sync(0xffffffffu, x[e], L / 2), y = x[e] * c[e] + (p < L / 2 ? -other : other) * s[e];
      if constexpr (kFp8) r.v[e] = fp8_code(y, 1.f);
      else r.v[e] = from_f<T>(y);
    }
    if (h0 + j * HA < heads) dst[(h0 + j * HA) * L + p] = r;
  }
}

// qkv_norm_rope_fp8's vt and v_scale (ops.h Qkv8) from the v part of qkv [B, S, 3, heads, 128]: one block of
// 256 threads per (128-key tile, head, batch). The tile's packs are loaded into registers (keys past S as
// zeros), their maximum magnitude gives the tile's scale, the codes go to shared memory [key][channel], and
// each thread writes 32-byte runs of vt rows (a channel, 32 positions in fp8_key_order).
template <class T>
__global__ void __launch_bounds__(256) v_tiles_fp8_kernel(const Pack<T>* __restrict__ qkv, uint8_t* __restrict__ vt,
                                                          float* __restrict__ v_scale, int S, int S32, int heads) {
  constexpr int P = kPack<T>, CP = 128 / P, NP = 128 * CP / 256;  // packs per key row, per thread
  constexpr int kRow = 128 + 16;                                    // shared row bytes (16-byte aligned)
  __shared__ __align__(16) uint8_t codes[128 * kRow];
  const int t = blockIdx.x, h = blockIdx.y, b = blockIdx.z, k0 = t * 128;
  Pack<T> a[NP];
#pragma unroll
  for (int j = 0; j < NP; ++j) {
    const int i = threadIdx.x + j * 256, key = k0 + i / CP;
    a[j] = key < S ? qkv[((int64_t(b) * S + key) * 3 + 2) * heads * CP + h * CP + i % CP] : Pack<T>{};
  }
  const float tile_amax = block_amax(a, 128 * CP);
  const float s = tile_amax > 0.f ? __fdiv_rn(tile_amax, kFp8E4m3Max) : FLT_MIN, inv = __frcp_rn(s);
  const int64_t bh = int64_t(b) * heads + h;
  if (threadIdx.x == 0) v_scale[bh * gridDim.x + t] = s;
#pragma unroll
  for (int j = 0; j < NP; ++j) {
    const int i = threadIdx.x + j * 256;
    Codes<T> c;
#pragma unroll
    for (int e = 0; e < P; ++e) c.v[e] = fp8_code(to_f(a[j].v[e]), inv);
    *reinterpret_cast<Codes<T>*>(codes + (i / CP) * kRow + (i % CP) * P) = c;
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < 2; ++j) {  // 128 channels x 4 runs of 32 positions
    const int item = threadIdx.x + j * 256, ch = item % 128, run = item / 128, pos0 = k0 + run * 32;
    if (pos0 >= S32) continue;
    uint32_t w[8];
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      w[q] = 0;
#pragma unroll
      for (int e = 0; e < 4; ++e) w[q] |= uint32_t(codes[(run * 32 + ops::fp8_key_order(4 * q + e)) * kRow + ch]) << (8 * e);
    }
    uint4* dst = reinterpret_cast<uint4*>(vt + (bh * 128 + ch) * S32 + pos0);
    dst[0] = make_uint4(w[0], w[1], w[2], w[3]);
    dst[1] = make_uint4(w[4], w[5], w[6], w[7]);
  }
}

// The fused kernel's inputs, or none when it does not take them (the callers compose the unfused ops then):
// F32/BF16 x with C a multiple of the pack and rows that fit a block; 16-byte aligned x, shift and scale of
// x's dtype; the weight of x's dtype (a BF16/F16 weight with F32 x is widened, exactly) or undefined.
struct NormModArgs {
  bool ok = false;
  Tensor w;
  RowBlock rb;
  int64_t rows = 0, ss = 0, sc = 0;
};
NormModArgs norm_mod_args(const Tensor& x, const Tensor& weight, const Tensor& shift, const Tensor& scale,
                          const char* op) {
  detail::check_act(x, op, "x");
  NormModArgs a;
  a.ss = detail::row_vector_stride(x, shift, op, "shift");
  a.sc = detail::row_vector_stride(x, scale, op, "scale");
  const int64_t c = x.dim(-1);
  a.rows = 1;
  for (int i = 0; i + 1 < x.ndim(); ++i) a.rows *= x.dim(i);
  if (weight.defined()) {
    detail::check_same_device(x, weight, op, "weight");
    detail::check_float(weight, op, "weight");
    ERNIE_CHECK(weight.numel() == c, op, ": weight ", shape_str(weight.shape()), " should have ", std::to_string(c),
                " elements");
  }
  const int P = x.dtype() == DType::F32 ? kPack<float> : kPack<__nv_bfloat16>;
  a.rb = row_block(c % P == 0 ? c / P : 0);
  const bool w_ok = !weight.defined() || weight.dtype() == x.dtype() || x.dtype() == DType::F32;
  a.ok = a.rows > 0 && a.rows <= INT32_MAX && a.rb.np > 0 && w_ok && shift.dtype() == x.dtype() &&
         scale.dtype() == x.dtype() && aligned16(x.raw()) && aligned16(shift.raw()) && aligned16(scale.raw());
  if (a.ok && weight.defined()) {
    a.w = weight.dtype() == x.dtype() ? weight : cast(weight, x.dtype());
    a.ok = aligned16(a.w.raw());
  }
  return a;
}

template <bool kFp8>
void launch_norm_modulate(const Tensor& x, const NormModArgs& a, const Tensor& shift, const Tensor& scale, float eps,
                          Tensor* y, ops::Weight* q, const float* fixed = nullptr) {
  cudaStream_t st = stream(detail::dev(x));
  ERNIE_DISPATCH_ACT(x.dtype(), "rms_norm_modulate", {
    constexpr int P = kPack<T>;
    ERNIE_DISPATCH_NP(a.rb.np, {
      rms_norm_modulate_kernel<T, NP, kFp8><<<unsigned(a.rows), a.rb.threads, 0, st>>>(
          x.data<Pack<T>>(), a.w.defined() ? a.w.data<Pack<T>>() : nullptr, shift.data<Pack<T>>(),
          scale.data<Pack<T>>(), y ? y->data<Pack<T>>() : nullptr, q ? q->w.data<Codes<T>>() : nullptr,
          q ? q->scale.data<float>() : nullptr, fixed, int(x.dim(-1) / P), a.rows / x.dim(0), a.ss / P, a.sc / P,
          eps);
    });
  });
  ERNIE_CUDA_LAUNCH("rms_norm_modulate");
}

}  // namespace

Tensor rms_norm_modulate(const Tensor& x, const Tensor& weight, float eps, const Tensor& shift, const Tensor& scale) {
  const NormModArgs a = norm_mod_args(x, weight, shift, scale, "rms_norm_modulate");
  if (!a.ok) return modulate(rms_norm(x, weight, eps), shift, scale);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  launch_norm_modulate<false>(x, a, shift, scale, eps, &y, nullptr);
  return y;
}

ops::Weight rms_norm_modulate_fp8(const Tensor& x, const Tensor& weight, float eps, const Tensor& shift,
                                  const Tensor& scale, const Tensor& static_scale) {
  const NormModArgs a = norm_mod_args(x, weight, shift, scale, "rms_norm_modulate_fp8");
  const int64_t c = x.dim(-1);
  if (!a.ok) {
    const Tensor y = rms_norm_modulate(x, weight, eps, shift, scale).reshape({a.rows, c});
    return static_scale.defined() ? quantize_static(y, DType::F8_E4M3, static_scale) : quantize(y, DType::F8_E4M3);
  }
  if (static_scale.defined()) detail::check_same_device(x, static_scale, "rms_norm_modulate_fp8", "static_scale");
  ops::Weight q(Tensor::empty({a.rows, c}, DType::F8_E4M3, x.device()),
                Tensor::empty({a.rows}, DType::F32, x.device()));
  launch_norm_modulate<true>(x, a, shift, scale, eps, nullptr, &q,
                             static_scale.defined() ? static_scale.data<float>() : nullptr);
  return q;
}

bool qkv_norm_rope_supported(const Tensor& qkv, int64_t heads, const Tensor& norm_q, const Tensor& norm_k,
                             const Tensor& cos, const Tensor& sin) {
  const int64_t D = qkv.dim(2) / (3 * heads);
  auto norm_ok = [&](const Tensor& w) { return !w.defined() || (w.numel() == D && w.device() == qkv.device()); };
  return D == 128 && (qkv.dtype() == DType::F32 || qkv.dtype() == DType::BF16) && aligned16(qkv.raw()) &&
         norm_ok(norm_q) && norm_ok(norm_k) && cos.dtype() == DType::F32 && sin.dtype() == DType::F32 &&
         cos.device() == qkv.device() && sin.device() == qkv.device() && aligned16(cos.raw()) && aligned16(sin.raw());
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
  if (B * S * heads == 0) return r;
  cudaStream_t st = stream(detail::dev(qkv));
  const int64_t table_b = cos.dim(0) == 1 ? 0 : S * D;
  ERNIE_DISPATCH_ACT(qkv.dtype(), "qkv_norm_rope", {
    constexpr int G = 4, HA = 32 * kPack<T> / 128;  // accesses per warp, heads per access
    const int64_t chunks = ((heads + HA - 1) / HA + G - 1) / G, units = B * S * 3 * chunks;
    ERNIE_CHECK((units + kWarps - 1) / kWarps <= INT32_MAX && heads <= INT32_MAX, "qkv_norm_rope: too many rows");
    qkv_norm_rope_kernel<T, G, Pack<T>><<<unsigned((units + kWarps - 1) / kWarps), dim3(32, kWarps), 0, st>>>(
        qkv.data<Pack<T>>(), vec(norm_q), vec(norm_k), cos.data<float>(), sin.data<float>(), r.q.data<Pack<T>>(),
        r.k.data<Pack<T>>(), r.v.data<Pack<T>>(), units, 3, int(heads), int(chunks), S, table_b, eps);
  });
  ERNIE_CUDA_LAUNCH("qkv_norm_rope");
  return r;
}

ops::Qkv8 qkv_norm_rope_fp8(const Tensor& qkv, int64_t heads, const Tensor& norm_q, const Tensor& norm_k, float eps,
                            const Tensor& cos, const Tensor& sin) {
  detail::check_act(qkv, "qkv_norm_rope_fp8", "qkv");
  const int64_t B = qkv.dim(0), S = qkv.dim(1), D = 128, S32 = (S + 31) / 32 * 32;
  const int64_t tiles = (S + ops::kFp8AttentionTile - 1) / ops::kFp8AttentionTile;
  ERNIE_CHECK(qkv.dim(2) == 3 * heads * D, "qkv_norm_rope_fp8: head_dim must be 128");
  ERNIE_CHECK(cos.ndim() == 3 && cos.shape() == sin.shape() && (cos.dim(0) == B || cos.dim(0) == 1) &&
                  cos.dim(1) == S && cos.dim(2) == D,
              "qkv_norm_rope_fp8: cos/sin ", shape_str(cos.shape()), " must be [", std::to_string(B), " or 1, ",
              std::to_string(S), ", ", std::to_string(D), "]");
  ERNIE_CHECK(S <= INT32_MAX - 32 && tiles <= INT32_MAX && heads <= 65535 && B <= 65535,
              "qkv_norm_rope_fp8: too many rows");
  ops::Qkv8 r{Tensor::empty({B, S, heads, D}, DType::F8_E4M3, qkv.device()),
              Tensor::empty({B, S, heads, D}, DType::F8_E4M3, qkv.device()),
              Tensor::empty({B, heads, D, S32}, DType::F8_E4M3, qkv.device()),
              Tensor::empty({B, heads, tiles}, DType::F32, qkv.device())};
  if (B * S * heads == 0) return r;
  cudaStream_t st = stream(detail::dev(qkv));
  const int64_t table_b = cos.dim(0) == 1 ? 0 : S * D;
  ERNIE_DISPATCH_ACT(qkv.dtype(), "qkv_norm_rope_fp8", {
    constexpr int G = 4, HA = 32 * kPack<T> / 128;
    const int64_t chunks = ((heads + HA - 1) / HA + G - 1) / G, units = B * S * 2 * chunks;
    ERNIE_CHECK((units + kWarps - 1) / kWarps <= INT32_MAX, "qkv_norm_rope_fp8: too many rows");
    qkv_norm_rope_kernel<T, G, Codes<T>><<<unsigned((units + kWarps - 1) / kWarps), dim3(32, kWarps), 0, st>>>(
        qkv.data<Pack<T>>(), vec(norm_q), vec(norm_k), cos.data<float>(), sin.data<float>(), r.q.data<Codes<T>>(),
        r.k.data<Codes<T>>(), nullptr, units, 2, int(heads), int(chunks), S, table_b, eps);
    ERNIE_CUDA_LAUNCH("qkv_norm_rope_fp8");
    v_tiles_fp8_kernel<T><<<dim3(unsigned(tiles), unsigned(heads), unsigned(B)), 256, 0, st>>>(
        qkv.data<Pack<T>>(), r.vt.data<uint8_t>(), r.v_scale.data<float>(), int(S), int(S32), int(heads));
  });
  ERNIE_CUDA_LAUNCH("qkv_norm_rope_fp8 (v tiles)");
  return r;
}

}  // namespace ernie::cuda
