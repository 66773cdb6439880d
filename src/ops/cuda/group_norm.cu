// GroupNorm over [B, C, *] (or channels-last [B, *, C]) with per-channel affine and optional fused SiLU.
// A group can hold millions of elements (VAE decoder at 1024²), so the statistics are split over chunks:
// pass 1 writes each chunk's (mean, M2), two passes over the chunk; pass 2 combines a group's chunks
// (Chan's formula, double); pass 3 normalises. NCHW: a chunk is a contiguous run of one group. NHWC: a
// chunk is a run of pixels with all their channels, a block's threads laid out as (channel packs, pixels)
// so that each thread keeps to the same channels, and its (mean, M2) per group go out at once.
#include <algorithm>

#include "ops/cuda/common.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/shape_rules.h"

namespace ernie::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = 16384;  // elements per block

__device__ float block_sum(float v, float* sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  float t = 0.f;
  for (int i = 0; i < kThreads / 32; ++i) t += sh[i];
  return t;
}

// grid (chunks, B*groups). stats[(bg * chunks + chunk) * 2] = (mean, M2) of the chunk.
template <class T>
__global__ void group_stats_kernel(const T* __restrict__ x, float* __restrict__ stats, int64_t len, int chunks) {
  __shared__ float sh[kThreads / 32];
  const int64_t bg = blockIdx.y, start = blockIdx.x * kChunk, end = min(len, start + kChunk);
  const T* p = x + bg * len;
  float s = 0.f;
  for (int64_t i = start + threadIdx.x; i < end; i += kThreads) s += to_f(p[i]);
  const float n = float(end - start);
  const float mean = block_sum(s, sh) / n;
  float m2 = 0.f;
  for (int64_t i = start + threadIdx.x; i < end; i += kThreads) {
    const float d = to_f(p[i]) - mean;
    m2 += d * d;
  }
  m2 = block_sum(m2, sh);
  if (threadIdx.x == 0) {
    stats[(bg * chunks + blockIdx.x) * 2] = mean;
    stats[(bg * chunks + blockIdx.x) * 2 + 1] = m2;
  }
}

struct Moments {
  double n, mean, m2;
};
__device__ Moments combine(Moments a, Moments b) {
  const double tot = a.n + b.n;
  if (tot == 0) return a;
  const double d = b.mean - a.mean;
  return {tot, a.mean + d * b.n / tot, a.m2 + b.m2 + d * d * a.n * b.n / tot};
}

// One warp per group: combines its chunks into (mean, 1/std), written over the first chunk's slot. Chunk c
// covers min(chunk, units - c * chunk) units of `unit` elements each (NCHW: elements; NHWC: pixels of a
// group's channels).
__global__ void group_finalize_kernel(float* __restrict__ stats, int64_t units, int64_t chunk, double unit,
                                      int chunks, float eps) {
  const int64_t bg = blockIdx.x;
  Moments m{0, 0, 0};
  for (int c = threadIdx.x; c < chunks; c += 32) {
    const double nb = double(min(chunk, units - int64_t(c) * chunk)) * unit;
    m = combine(m, {nb, stats[(bg * chunks + c) * 2], stats[(bg * chunks + c) * 2 + 1]});
  }
  for (int o = 16; o > 0; o >>= 1) {
    Moments other{__shfl_xor_sync(0xffffffffu, m.n, o), __shfl_xor_sync(0xffffffffu, m.mean, o),
                  __shfl_xor_sync(0xffffffffu, m.m2, o)};
    m = combine(m, other);
  }
  __syncwarp();
  if (threadIdx.x == 0) {
    stats[bg * chunks * 2] = float(m.mean);
    stats[bg * chunks * 2 + 1] = float(1.0 / sqrt(m.m2 / m.n + double(eps)));
  }
}

template <class T>
__global__ void group_apply_kernel(const T* __restrict__ x, const float* __restrict__ stats, VecF w, VecF b,
                                   T* __restrict__ y, int64_t len, int64_t hw, int chunks, int groups, int cg,
                                   bool silu) {
  const int64_t bg = blockIdx.y;
  const float mean = stats[bg * chunks * 2], inv = stats[bg * chunks * 2 + 1];
  const int g = int(bg % groups);
  const int64_t start = blockIdx.x * kChunk, end = min(len, start + kChunk);
  const T* p = x + bg * len;
  T* q = y + bg * len;
  for (int64_t i = start + threadIdx.x; i < end; i += kThreads) {
    const int ch = g * cg + int(unsigned(i) / unsigned(hw));  // len < 2^32 (checked)
    float v = (to_f(p[i]) - mean) * inv;
    if (w.defined()) v *= w[ch];
    if (b.defined()) v += b[ch];
    if (silu) v = v / (1.f + __expf(-v));
    q[i] = from_f<T>(v);
  }
}

// ---- NHWC -------------------------------------------------------------------------------------------------
constexpr int64_t kChunkNhwc = 32768;  // elements per block (whole pixels)

// V consecutive channels of x at element offset i: one 16-byte pack when V is the pack size, else one element.
template <class T, int V>
__device__ __forceinline__ void load_v(const T* __restrict__ x, int64_t i, float (&v)[V]) {
  if constexpr (V == 1) {
    v[0] = to_f(x[i]);
  } else {
    const Pack<T> a = *reinterpret_cast<const Pack<T>*>(x + i);
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = to_f(a.v[e]);
  }
}

// grid (chunks, B), block (C / V channel packs, P pixels): pixels [chunk * ppc, +ppc) of batch row b.
// stats[((b * groups + g) * chunks + chunk) * 2] = (mean, M2) of group g over the chunk.
template <class T, int V>
__global__ void group_stats_nhwc_kernel(const T* __restrict__ x, float* __restrict__ stats, int64_t hw, int C,
                                        int groups, int64_t ppc, int chunks) {
  extern __shared__ float sh[];  // [P][C] per-channel partial sums, then [groups] means
  const int P = blockDim.y, c0 = threadIdx.x * V, cg = C / groups, t = threadIdx.y * blockDim.x + threadIdx.x;
  float* part = sh;
  float* gmean = sh + P * C;
  const int64_t p0 = blockIdx.x * ppc, p1 = min(hw, p0 + ppc);
  const T* xb = x + blockIdx.y * hw * C + c0;
  float s[V] = {}, v[V];
  for (int64_t p = p0 + threadIdx.y; p < p1; p += P) {
    load_v<T, V>(xb, p * C, v);
#pragma unroll
    for (int e = 0; e < V; ++e) s[e] += v[e];
  }
#pragma unroll
  for (int e = 0; e < V; ++e) part[threadIdx.y * C + c0 + e] = s[e];
  __syncthreads();
  const float n = float((p1 - p0) * cg);
  if (t < groups) {
    float a = 0.f;
    for (int r = 0; r < P; ++r)
      for (int k = 0; k < cg; ++k) a += part[r * C + t * cg + k];
    gmean[t] = a / n;
  }
  __syncthreads();
  float m[V];
#pragma unroll
  for (int e = 0; e < V; ++e) m[e] = gmean[(c0 + e) / cg], s[e] = 0.f;
  for (int64_t p = p0 + threadIdx.y; p < p1; p += P) {
    load_v<T, V>(xb, p * C, v);
#pragma unroll
    for (int e = 0; e < V; ++e) s[e] += (v[e] - m[e]) * (v[e] - m[e]);
  }
#pragma unroll
  for (int e = 0; e < V; ++e) part[threadIdx.y * C + c0 + e] = s[e];
  __syncthreads();
  if (t < groups) {
    float a = 0.f;
    for (int r = 0; r < P; ++r)
      for (int k = 0; k < cg; ++k) a += part[r * C + t * cg + k];
    float* out = stats + ((int64_t(blockIdx.y) * groups + t) * chunks + blockIdx.x) * 2;
    out[0] = gmean[t];
    out[1] = a;
  }
}

// grid (blocks, B), block (C / V channel packs, P pixels), like the stats kernel: each thread keeps to the
// same V channels, so their (mean, 1/std, weight, bias) are read once; it then walks pixels of batch row b,
// (x - mean) * inv * w + b per channel, SiLU when asked.
template <class T, int V>
__global__ void group_apply_nhwc_kernel(const T* __restrict__ x, const float* __restrict__ stats, VecF w, VecF b,
                                        T* __restrict__ y, int64_t hw, int C, int groups, int chunks, bool silu) {
  const int c0 = threadIdx.x * V, cg = C / groups;
  float mean[V], inv[V], wc[V], bc[V];
#pragma unroll
  for (int e = 0; e < V; ++e) {
    const float* st = stats + (int64_t(blockIdx.y) * groups + (c0 + e) / cg) * chunks * 2;
    mean[e] = st[0], inv[e] = st[1];
    wc[e] = w.defined() ? w[c0 + e] : 1.f;
    bc[e] = b.defined() ? b[c0 + e] : 0.f;
  }
  const bool affine_w = w.defined(), affine_b = b.defined();
  const T* xb = x + blockIdx.y * hw * C + c0;
  T* yb = y + blockIdx.y * hw * C + c0;
  for (int64_t p = blockIdx.x * int64_t(blockDim.y) + threadIdx.y; p < hw; p += int64_t(gridDim.x) * blockDim.y) {
    float v[V];
    load_v<T, V>(xb, p * C, v);
    Pack<T> o;
#pragma unroll
    for (int e = 0; e < V; ++e) {
      float r = (v[e] - mean[e]) * inv[e];
      if (affine_w) r *= wc[e];
      if (affine_b) r += bc[e];
      if (silu) r = silu_f(r);
      o.v[e] = from_f<T>(r);
    }
    if constexpr (V == 1)
      yb[p * C] = o.v[0];
    else
      *reinterpret_cast<Pack<T>*>(yb + p * C) = o;
  }
}

// The stats kernel's block for C channels in packs of V: C / V lanes (at most 1024) by P pixels.
struct NhwcBlock {
  int L, P;
  bool fits(int groups) const { return L <= 1024 && groups <= L * P; }  // one thread per group sums it
};
NhwcBlock nhwc_block(int64_t C, int V) {
  const int64_t L = C / V;
  return {int(std::min<int64_t>(L, 1 << 20)), int(std::max<int64_t>(1, 256 / L))};
}

// The three passes on x [B, hw, C] (nhwc_block(C, V) fits the groups).
template <class T, int V>
void group_norm_nhwc(const Tensor& x, Tensor& y, int groups, const Tensor& weight, const Tensor& bias, float eps,
                     bool silu, cudaStream_t st) {
  const int64_t B = x.dim(0), C = x.dim(-1), hw = x.numel() / (B * C);
  const auto [L, P] = nhwc_block(C, V);
  const int64_t ppc = std::max<int64_t>(P, kChunkNhwc / C);
  const int chunks = int((hw + ppc - 1) / ppc);
  Tensor stats = Tensor::empty({B * groups, chunks, 2}, DType::F32, x.device());
  const size_t shmem = size_t(P * C + groups) * sizeof(float);
  group_stats_nhwc_kernel<T, V><<<dim3(unsigned(chunks), unsigned(B)), dim3(unsigned(L), unsigned(P)), shmem, st>>>(
      x.data<T>(), stats.data<float>(), hw, int(C), groups, ppc, chunks);
  ERNIE_CUDA_LAUNCH("group_norm");
  group_finalize_kernel<<<unsigned(B * groups), 32, 0, st>>>(stats.data<float>(), hw, ppc, double(C / groups), chunks,
                                                             eps);
  ERNIE_CUDA_LAUNCH("group_norm");
  // Enough blocks for four waves of 2048 threads per SM, each walking pixels with a grid stride.
  const int64_t waves = int64_t(sm_count(detail::dev(x))) * 2048 / (L * P) * 4;
  const int64_t rows = std::min<int64_t>((hw + P - 1) / P, std::max<int64_t>(1, waves / B));
  group_apply_nhwc_kernel<T, V><<<dim3(unsigned(rows), unsigned(B)), dim3(unsigned(L), unsigned(P)), 0, st>>>(
      x.data<T>(), stats.data<float>(), vec(weight), vec(bias), y.data<T>(), hw, int(C), groups, chunks, silu);
  ERNIE_CUDA_LAUNCH("group_norm");
}

}  // namespace

Tensor group_norm(const Tensor& x, int groups, const Tensor& weight, const Tensor& bias, float eps, bool silu,
                  ops::Layout layout) {
  detail::check_act(x, "group_norm", "x");
  ops::rules::group_norm(x, groups, layout);
  const bool nhwc = layout == ops::Layout::NHWC;
  const int64_t n = x.dim(0), c = x.dim(nhwc ? -1 : 1), hw = (n * c) ? x.numel() / (n * c) : 0;
  for (auto [t, what] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}}) {
    if (!t->defined()) continue;
    detail::check_same_device(x, *t, "group_norm", what);
    detail::check_float(*t, "group_norm", what);
    ERNIE_CHECK(t->numel() == c, "group_norm: ", what, " ", shape_str(t->shape()), " should have ", std::to_string(c),
                " elements");
  }
  if (nhwc) {
    Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
    if (y.numel() == 0) return y;
    cudaStream_t st = stream(detail::dev(x));
    ERNIE_DISPATCH_ACT(x.dtype(), "group_norm", {
      constexpr int kV = kPack<T>;
      if (c % kV == 0 && nhwc_block(c, kV).fits(groups) && aligned16(x.raw()) && aligned16(y.raw())) {
        group_norm_nhwc<T, kV>(x, y, groups, weight, bias, eps, silu, st);
        return y;
      }
      if (nhwc_block(c, 1).fits(groups)) {
        group_norm_nhwc<T, 1>(x, y, groups, weight, bias, eps, silu, st);
        return y;
      }
    });
    // Wider than a block: through the NCHW kernels.
    std::vector<int> to_nchw{0, x.ndim() - 1}, to_nhwc{0};
    for (int d = 1; d + 1 < x.ndim(); ++d) to_nchw.push_back(d), to_nhwc.push_back(d + 1);
    to_nhwc.push_back(1);
    return cuda::permute(cuda::group_norm(cuda::permute(x, to_nchw), groups, weight, bias, eps, silu), to_nhwc);
  }
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  const int64_t cg = c / groups, len = cg * hw;
  if (y.numel() == 0) return y;
  ERNIE_CHECK(len < (int64_t(1) << 32), "group_norm: group of ", std::to_string(len), " elements is too large");
  const int chunks = int((len + kChunk - 1) / kChunk);
  Tensor stats = Tensor::empty({n * groups, chunks, 2}, DType::F32, x.device());
  cudaStream_t st = stream(detail::dev(x));
  const dim3 grid(unsigned(chunks), unsigned(n * groups));
  ERNIE_DISPATCH_ACT(x.dtype(), "group_norm", {
    group_stats_kernel<T><<<grid, kThreads, 0, st>>>(x.data<T>(), stats.data<float>(), len, chunks);
    ERNIE_CUDA_LAUNCH("group_norm");
    group_finalize_kernel<<<unsigned(n * groups), 32, 0, st>>>(stats.data<float>(), len, kChunk, 1.0, chunks, eps);
    ERNIE_CUDA_LAUNCH("group_norm");
    group_apply_kernel<T><<<grid, kThreads, 0, st>>>(x.data<T>(), stats.data<float>(), vec(weight), vec(bias),
                                                     y.data<T>(), len, hw, chunks, groups, int(cg), silu);
  });
  ERNIE_CUDA_LAUNCH("group_norm");
  return y;
}

}  // namespace ernie::cuda
