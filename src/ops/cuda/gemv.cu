// linear for a few rows (token-by-token decoding): y[m, n] = x[m, :] · w[n, :] (+ b[n]) for M <= 4. One warp
// per output column reads the weight row once in 16-byte packs and dots it with every x row (fp32 sums).
// Measured on the H200 (bench-pe decode): the same decode speed as cuBLASLt (179 tokens/s with either; the step
// is GPU-bound), 2.7 TB/s on the weight read; kept for its lower host cost per call and because the recorded
// decode figures include it. Splitting a column's K over several warps when columns are few measured slower
// (decode 250 vs 267 tokens/s).
// The grid is sized to what fits on the GPU at once, each warp taking every W-th column (W warps in all,
// chosen so every warp gets the same number of columns give or take one): no second, mostly idle wave of
// blocks (a 9216-column matrix took 1.09 waves of 8-warp blocks).
// ERNIE_PDL=1 launches it as a programmatic dependent (pdl.cuh): it prefetches a prefix of its weight rows
// into L2 while the kernel before it finishes.
// swiglu_linear: the same kernel whose x rows are silu(gate)·up of a stacked gate|up row, staged (rounded to
// the activation dtype, as swiglu stores it) in shared memory by each block first.
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
constexpr size_t kMaxStagedBytes = 48 * 1024;  // the default dynamic shared memory limit
constexpr int64_t kPrefetchBytes = 24 << 20;    // L2 prefetch budget per GEMV under PDL (H200: 50 MB of L2)

// kSwiglu: x is [M, 2·kp] packs (gate then up), staged to shared memory as silu(gate)·up [M, kp].
// prefetch: with PDL (pdl.cuh), bytes of each warp's first weight row asked into L2 before the previous kernel
// has finished (0: none).
template <class T, int M, bool kSwiglu>
__global__ void gemv_kernel(const Pack<T>* __restrict__ x, const Pack<T>* __restrict__ w, VecF bias,
                            T* __restrict__ y, int64_t n_out, int kp, unsigned prefetch) {
  extern __shared__ __align__(16) unsigned char staged_bytes[];
  pdl_launch_dependents();
  if (prefetch && threadIdx.x == 0 && blockIdx.x * int64_t(kWarps) + threadIdx.y < n_out)
    prefetch_l2(w + (blockIdx.x * int64_t(kWarps) + threadIdx.y) * kp, prefetch);
  pdl_wait();  // x (and y's memory) belong to earlier kernels
  const Pack<T>* xin = x;
  if constexpr (kSwiglu) {
    Pack<T>* xs = reinterpret_cast<Pack<T>*>(staged_bytes);
    for (int i = threadIdx.y * 32 + threadIdx.x; i < M * kp; i += 32 * kWarps) {
      const int m = i / kp, c = i % kp;
      const Pack<T> g = x[int64_t(m) * 2 * kp + c], u = x[int64_t(m) * 2 * kp + kp + c];
      Pack<T> r;
#pragma unroll
      for (int e = 0; e < kPack<T>; ++e) r.v[e] = from_f<T>(silu_f(to_f(g.v[e])) * to_f(u.v[e]));
      xs[i] = r;
    }
    __syncthreads();
    xin = xs;
  }
  const int64_t warps = int64_t(gridDim.x) * kWarps;
  for (int64_t n = blockIdx.x * int64_t(kWarps) + threadIdx.y; n < n_out; n += warps) {
    const Pack<T>* wr = w + n * kp;
    float acc[M] = {};
#pragma unroll 4
    for (int i = threadIdx.x; i < kp; i += 32) {
      const Pack<T> a = wr[i];
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const Pack<T> b = xin[m * kp + i];
#pragma unroll
        for (int e = 0; e < kPack<T>; ++e) acc[m] += to_f(a.v[e]) * to_f(b.v[e]);
      }
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const float s = warp_sum(acc[m]);
      if (threadIdx.x == 0) y[m * n_out + n] = from_f<T>(s + (bias.defined() ? bias[n] : 0.f));
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

// Blocks of `kernel` (kWarps warps, `smem` dynamic bytes) resident on the whole of `device` at once.
int resident_blocks(const void* kernel, size_t smem, int device) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, size_t, int>, int> known;
  std::lock_guard<std::mutex> lk(mu);
  auto [it, fresh] = known.try_emplace({kernel, smem, device}, 0);
  if (fresh) {
    int per_sm = 0, sms = 0;
    ERNIE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * kWarps, smem));
    ERNIE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    it->second = std::max(1, per_sm * sms);
  }
  return it->second;
}

template <class T, bool kSwiglu>
void launch(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, int64_t M, int64_t N, int64_t K) {
  const int device = detail::dev(x);
  cudaStream_t st = stream(device);
  const int kp = int(K / kPack<T>);
  const size_t smem = kSwiglu ? size_t(M * K) * sizeof(T) : 0;
  const dim3 block(32, kWarps);
  const bool pdl = pdl_enabled();
  const char* grid_env = std::getenv("ERNIE_GEMV_GRID");
  const bool grid_per_column = grid_env && std::strcmp(grid_env, "columns") == 0;
  auto args = [&](auto kernel) {
    // As many warps as fit at once, then as few as give every warp the same number of columns (±1).
    // (ERNIE_GEMV_GRID=columns: a warp per column, the grid before this, for measuring.)
    const int64_t fit =
        grid_per_column ? N : int64_t(resident_blocks(reinterpret_cast<const void*>(kernel), smem, device)) * kWarps;
    const int64_t per_warp = (N + fit - 1) / fit, warps = (N + per_warp - 1) / per_warp;
    const unsigned grid = unsigned((warps + kWarps - 1) / kWarps);
    // PDL: the first rows' prefix, within kPrefetchBytes in all (a part of L2).
    const int64_t row_bytes = K * int64_t(sizeof(T));
    const unsigned prefetch = pdl ? unsigned(std::min(row_bytes, kPrefetchBytes / warps) / 16 * 16) : 0u;
    launch_kernel(pdl, kernel, dim3(grid), block, smem, st, x.data<Pack<T>>(), w.data<Pack<T>>(), vec(b), y.data<T>(),
                  N, kp, prefetch);
  };
  switch (M) {
    case 1: args(gemv_kernel<T, 1, kSwiglu>); break;
    case 2: args(gemv_kernel<T, 2, kSwiglu>); break;
    case 3: args(gemv_kernel<T, 3, kSwiglu>); break;
    default: args(gemv_kernel<T, 4, kSwiglu>); break;
  }
  ERNIE_CUDA_LAUNCH("gemv");
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

Tensor swiglu_linear(const Tensor& gate_up, const ops::Weight& w) {
  detail::check_act(gate_up, "swiglu_linear", "gate_up");
  detail::check_same_device(gate_up, w.w, "swiglu_linear", "weight");
  const int64_t K = ops::rules::swiglu_linear(gate_up, w.w), N = w.w.dim(0), M = gate_up.numel() / (2 * K);
  const bool fused = !w.quantized() && K > 0 && N > 0 && gemv_supported(gate_up, w.w, M) &&
                     size_t(M * K) * dtype_size(gate_up.dtype()) <= kMaxStagedBytes;
  Shape ys = gate_up.shape();
  if (!fused) {  // the activation, then linear
    ys.back() = K;
    Tensor act = Tensor::empty(ys, gate_up.dtype(), gate_up.device());
    const int64_t n = act.numel();
    if (n > 0) {
      cudaStream_t st = stream(detail::dev(gate_up));
      ERNIE_DISPATCH_ACT(gate_up.dtype(), "swiglu_linear", {
        if (K % kPack<T> == 0 && aligned16(gate_up.raw()))
          swiglu_halves_kernel<T, kPack<T>><<<detail::blocks_for(n / kPack<T>, 256), 256, 0, st>>>(
              gate_up.data<T>(), act.data<T>(), n / kPack<T>, K);
        else
          swiglu_halves_kernel<T, 1><<<detail::blocks_for(n, 256), 256, 0, st>>>(gate_up.data<T>(), act.data<T>(), n,
                                                                                K);
      });
      ERNIE_CUDA_LAUNCH("swiglu_linear");
    }
    return w.quantized() ? linear_q(act, w.w, w.scale, {}) : linear(act, w.w, {});
  }
  ys.back() = N;
  Tensor y = Tensor::empty(ys, gate_up.dtype(), gate_up.device());
  if (gate_up.dtype() == DType::F32) launch<float, true>(gate_up, w.w, {}, y, M, N, K);
  else launch<__nv_bfloat16, true>(gate_up, w.w, {}, y, M, N, K);
  return y;
}

}  // namespace ernie::cuda
