// linear for a few rows (token-by-token decoding): y[m, n] = x[m, :] · w[n, :] (+ b[n]) for M <= 4. One warp
// per output column reads the weight row once in 16-byte packs and dots it with every x row (fp32 sums).
// Measured on the H200 (bench-pe decode): the same decode speed as cuBLASLt (179 tokens/s with either; the step
// is GPU-bound), 2.7 TB/s on the weight read; kept for its lower host cost per call and because the recorded
// decode figures include it. Splitting a column's K over several warps when columns are few measured slower
// (decode 250 vs 267 tokens/s).
#include "ops/cuda/common.h"
#include "ops/cuda/gemm.h"

namespace ernie::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kMaxRows = 4;

template <class T, int M>
__global__ void gemv_kernel(const Pack<T>* __restrict__ x, const Pack<T>* __restrict__ w, VecF bias,
                            T* __restrict__ y, int64_t n_out, int kp) {
  const int64_t n = blockIdx.x * int64_t(kWarps) + threadIdx.y;
  if (n >= n_out) return;
  const Pack<T>* wr = w + n * kp;
  float acc[M] = {};
#pragma unroll 4
  for (int i = threadIdx.x; i < kp; i += 32) {
    const Pack<T> a = wr[i];
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const Pack<T> b = x[m * kp + i];
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

template <class T>
void launch(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, int64_t M, int64_t N, int64_t K,
            cudaStream_t st) {
  const int kp = int(K / kPack<T>);
  const dim3 block(32, kWarps);
  const unsigned grid = unsigned((N + kWarps - 1) / kWarps);
  auto args = [&](auto kernel) {
    kernel<<<grid, block, 0, st>>>(x.data<Pack<T>>(), w.data<Pack<T>>(), vec(b), y.data<T>(), N, kp);
  };
  switch (M) {
    case 1: args(gemv_kernel<T, 1>); break;
    case 2: args(gemv_kernel<T, 2>); break;
    case 3: args(gemv_kernel<T, 3>); break;
    default: args(gemv_kernel<T, 4>); break;
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
  cudaStream_t st = stream(detail::dev(x));
  if (x.dtype() == DType::F32) launch<float>(x, w, b, y, M, N, K, st);
  else launch<__nv_bfloat16>(x, w, b, y, M, N, K, st);
}

}  // namespace ernie::cuda
