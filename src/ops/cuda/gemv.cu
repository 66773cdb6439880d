// linear for a few rows (token-by-token decoding): y[m, n] = x[m, :] · w[n, :] (+ b[n]) for M <= 4. One warp
// per output column streams the weight row once in 16-byte packs (four packs per lane in flight before any
// arithmetic, evict-first so the weights do not push the KV cache and activations out of L2) and dots it with
// every x row (fp32 sums). Measured on the H200 (CudaPerf.DISABLED_Decode): eight packs per lane took 84
// registers and ran slower (fewer warps per SM), and so did fewer registers forced by launch bounds (spills).
// The grid is sized to what fits on the GPU at once, each warp taking every W-th column (W warps in all,
// chosen so every warp gets the same number of columns give or take one): no second, mostly idle wave.
// kPair (linear_swiglu): the warp of column n also dots row n + N of a stacked gate|up weight [2N, K] and
// stores silu(gate)·up, each dot rounded to the activation dtype first as a stored projection would be.
// Launched as a programmatic dependent where pdl_enabled (pdl.cuh).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "ops/cuda/common.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/pdl.cuh"
#include "ops/shape_rules.h"

namespace ernie::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kMaxRows = 4;

// One 16-byte pack of a weight row, read once: streamed past L1 and first out of L2.
template <class T>
__device__ __forceinline__ Pack<T> load_stream(const Pack<T>* p) {
  const uint4 u = __ldcs(reinterpret_cast<const uint4*>(p));
  Pack<T> r;
  std::memcpy(&r, &u, sizeof(r));
  return r;
}

template <class T, int M, bool kPair>
__global__ void __launch_bounds__(32 * kWarps) gemv_kernel(const Pack<T>* __restrict__ x,
                                                           const Pack<T>* __restrict__ w, VecF bias,
                                                           T* __restrict__ y, int64_t n_out, int kp, bool prefetch) {
  constexpr int kRows = kPair ? 2 : 1, kUnroll = kPair ? 2 : 4;
  const int64_t warps = int64_t(gridDim.x) * kWarps, n0 = blockIdx.x * int64_t(kWarps) + threadIdx.y;
  // The weights are no kernel's output: the first column's row(s) go into L2, one 128-byte line per lane,
  // while the previous kernel finishes.
  if (prefetch && n0 < n_out)
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      for (int i = threadIdx.x * 8; i < kp; i += 256)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(w + (n0 + r * n_out) * kp + i));
  pdl_wait();  // x (and y's memory) belong to earlier kernels
  pdl_launch_dependents();
  for (int64_t n = n0; n < n_out; n += warps) {
    const Pack<T>* wr[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) wr[r] = w + (n + r * n_out) * kp;
    float acc[kRows][M] = {};
    for (int i0 = threadIdx.x; i0 < kp; i0 += 32 * kUnroll) {
      Pack<T> a[kRows][kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int r = 0; r < kRows; ++r)
          if (i0 + 32 * u < kp) a[r][u] = load_stream(wr[r] + i0 + 32 * u);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = i0 + 32 * u;
        if (i >= kp) break;
#pragma unroll
        for (int m = 0; m < M; ++m) {
          const Pack<T> b = x[m * kp + i];
#pragma unroll
          for (int r = 0; r < kRows; ++r)
#pragma unroll
            for (int e = 0; e < kPack<T>; ++e) acc[r][m] += to_f(a[r][u].v[e]) * to_f(b.v[e]);
        }
      }
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float s[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) s[r] = warp_sum(acc[r][m]);
      if (threadIdx.x != 0) continue;
      if constexpr (kPair) {
        const float gate = to_f(from_f<T>(s[0])), up = to_f(from_f<T>(s[1]));
        y[m * n_out + n] = from_f<T>(silu_f(gate) * up);
      } else {
        y[m * n_out + n] = from_f<T>(s[0] + (bias.defined() ? bias[n] : 0.f));
      }
    }
  }
}

// out[r, i] = silu(gate_up[r, i]) · gate_up[r, I + i]: the activation of the rows the GEMV does not take.
// P elements per access (I % P == 0, rows aligned to P elements).
template <class T, int P>
struct alignas(sizeof(T) * P) Elems {
  T v[P];
};
template <class T, int P>
__global__ void swiglu_halves_kernel(const T* __restrict__ gate_up, T* __restrict__ out, int64_t n, int64_t I) {
  using E = Elems<T, P>;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n; p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = p * P % I;
    const T* row = gate_up + (p * P / I) * 2 * I;
    const E g = *reinterpret_cast<const E*>(row + i), u = *reinterpret_cast<const E*>(row + I + i);
    E r;
#pragma unroll
    for (int e = 0; e < P; ++e) r.v[e] = from_f<T>(silu_f(to_f(g.v[e])) * to_f(u.v[e]));
    reinterpret_cast<E*>(out)[p] = r;
  }
}

// Measurement knob, removed once measured: ERNIE_GEMV_PREFETCH=0 leaves the L2 prefetch out.
bool prefetch_knob() {
  static const bool on = [] {
    const char* e = std::getenv("ERNIE_GEMV_PREFETCH");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  return on;
}

// Blocks of `kernel` (kWarps warps) resident on the whole of `device` at once.
int resident_blocks(const void* kernel, int device) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int>, int> known;
  std::lock_guard<std::mutex> lk(mu);
  auto [it, fresh] = known.try_emplace({kernel, device}, 0);
  if (fresh) {
    int per_sm = 0, sms = 0;
    ERNIE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * kWarps, 0));
    ERNIE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    it->second = std::max(1, per_sm * sms);
  }
  return it->second;
}

// N output columns (kPair: of w's 2N rows) for M rows of x.
template <class T, bool kPair>
void launch(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, int64_t M, int64_t N, int64_t K) {
  const int device = detail::dev(x);
  auto args = [&](auto kernel) {
    // As many warps as fit at once, then as few as give every warp the same number of columns (±1).
    const int64_t fit = int64_t(resident_blocks(reinterpret_cast<const void*>(kernel), device)) * kWarps;
    const int64_t per_warp = (N + fit - 1) / fit, warps = (N + per_warp - 1) / per_warp;
    const unsigned grid = unsigned((warps + kWarps - 1) / kWarps);
    launch_kernel(pdl_enabled(device), kernel, dim3(grid), dim3(32, kWarps), 0, stream(device), x.data<Pack<T>>(),
                  w.data<Pack<T>>(), vec(b), y.data<T>(), N, int(K / kPack<T>), prefetch_knob());
  };
  switch (M) {
    case 1: args(gemv_kernel<T, 1, kPair>); break;
    case 2: args(gemv_kernel<T, 2, kPair>); break;
    case 3: args(gemv_kernel<T, 3, kPair>); break;
    default: args(gemv_kernel<T, 4, kPair>); break;
  }
  ERNIE_CUDA_LAUNCH(kPair ? "linear_swiglu" : "gemv");
}

}  // namespace

bool gemv_supported(const Tensor& x, const Tensor& w, int64_t M) {
  const int pack = x.dtype() == DType::F32 ? 4 : 8;
  return M >= 1 && M <= kMaxRows && x.dtype() == w.dtype() && (x.dtype() == DType::F32 || x.dtype() == DType::BF16) &&
         w.dim(1) % pack == 0 && aligned16(x.raw()) && aligned16(w.raw()) && w.dim(0) <= INT32_MAX * int64_t(kWarps);
}

void gemv(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, int64_t M, int64_t N, int64_t K) {
  if (x.dtype() == DType::F32) launch<float, false>(x, w, b, y, M, N, K);
  else launch<__nv_bfloat16, false>(x, w, b, y, M, N, K);
}

Tensor linear_swiglu(const Tensor& x, const ops::Weight& gate_up) {
  detail::check_act(x, "linear_swiglu", "x");
  detail::check_same_device(x, gate_up.w, "linear_swiglu", "weight");
  const int64_t I = ops::rules::linear_swiglu(x, gate_up.w), K = x.dim(-1), M = K ? x.numel() / K : 0;
  Shape ys = x.shape();
  ys.back() = I;
  if (!gate_up.quantized() && K > 0 && I > 0 && M > 0 && gemv_supported(x, gate_up.w, M)) {
    Tensor y = Tensor::empty(ys, x.dtype(), x.device());
    if (x.dtype() == DType::F32) launch<float, true>(x, gate_up.w, {}, y, M, I, K);
    else launch<__nv_bfloat16, true>(x, gate_up.w, {}, y, M, I, K);
    return y;
  }
  // The projection, then the activation over its halves.
  const Tensor h = gate_up.quantized() ? linear_q(x, gate_up.w, gate_up.scale, {}) : linear(x, gate_up.w, {});
  Tensor y = Tensor::empty(ys, h.dtype(), x.device());
  const int64_t n = y.numel();
  if (n == 0) return y;
  cudaStream_t st = stream(detail::dev(x));
  ERNIE_DISPATCH_ACT(h.dtype(), "linear_swiglu", {
    if (I % kPack<T> == 0 && aligned16(h.raw()))
      swiglu_halves_kernel<T, kPack<T>><<<detail::blocks_for(n / kPack<T>, 256), 256, 0, st>>>(h.data<T>(), y.data<T>(),
                                                                                             n / kPack<T>, I);
    else
      swiglu_halves_kernel<T, 1><<<detail::blocks_for(n, 256), 256, 0, st>>>(h.data<T>(), y.data<T>(), n, I);
  });
  ERNIE_CUDA_LAUNCH("linear_swiglu");
  return y;
}

}  // namespace ernie::cuda
