// linear for a few rows (token-by-token decoding): y[m, n] = x[m, :] · w[n, :] (+ b[n]) for M <= 4. One warp
// per output column reads the weight row once in 16-byte packs and dots it with every x row (fp32 sums).
// cuBLASLt costs ~25 µs of host time per call against ~4 µs for a launch (ERNIE_PROFILE_HOST on the H200,
// bench-pe decode), which made batch-1 decoding host-bound; this kernel's GPU time is the weight read.
#include "ops/cuda/common.h"
#include "ops/cuda/gemm.h"

namespace ernie::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kMaxRows = 4;

// `wpr` warps share an output column (a slice of K each) when there are too few columns to fill the GPU.
template <class T, int M>
__global__ void gemv_kernel(const Pack<T>* __restrict__ x, const Pack<T>* __restrict__ w, VecF bias,
                            T* __restrict__ y, int64_t n_out, int kp, int wpr) {
  __shared__ float part[kWarps][M];
  const int64_t n = blockIdx.x * int64_t(kWarps / wpr) + threadIdx.y / wpr;
  const int slice = threadIdx.y % wpr;
  const Pack<T>* wr = w + min(n, n_out - 1) * kp;
  float acc[M] = {};
#pragma unroll 4
  for (int i = slice * 32 + threadIdx.x; i < kp && n < n_out; i += 32 * wpr) {
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
    if (threadIdx.x == 0) part[threadIdx.y][m] = s;
  }
  __syncthreads();
  if (slice != 0 || threadIdx.x >= M || n >= n_out) return;
  float s = 0.f;
  for (int k = 0; k < wpr; ++k) s += part[threadIdx.y + k][threadIdx.x];
  y[threadIdx.x * n_out + n] = from_f<T>(s + (bias.defined() ? bias[n] : 0.f));
}

template <class T>
void launch(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, int64_t M, int64_t N, int64_t K,
            cudaStream_t st) {
  const int kp = int(K / kPack<T>);
  int wpr = 1;  // warps per column: enough warps for ~32 per SM of an H200-sized GPU
  while (wpr < kWarps && N * wpr < 132 * 32) wpr *= 2;
  const dim3 block(32, kWarps);
  const int64_t per_block = kWarps / wpr;
  const unsigned grid = unsigned((N + per_block - 1) / per_block);
  auto args = [&](auto kernel) {
    kernel<<<grid, block, 0, st>>>(x.data<Pack<T>>(), w.data<Pack<T>>(), vec(b), y.data<T>(), N, kp, wpr);
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
