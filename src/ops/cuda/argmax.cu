// argmax over the last dim: one block per row; each thread keeps the first index of its largest value, then
// the block reduces (value, index) pairs preferring the larger value and, on ties, the smaller index. A NaN
// makes the row's answer -1, which the host turns into an error. Only the indices travel back.
#include <cmath>

#include "ops/cuda/common.h"
#include "ops/cuda/cuda_ops.h"

namespace ernie::cuda {

namespace {

constexpr int kThreads = 512;

struct Best {
  float v;
  int64_t i;  // -1: a NaN was seen
};

__device__ __forceinline__ Best better(Best a, Best b) {
  if (a.i < 0 || b.i < 0) return {0.f, -1};
  if (b.v > a.v || (b.v == a.v && b.i < a.i)) return b;
  return a;
}

template <class T>
__global__ void argmax_kernel(const T* __restrict__ x, int64_t n, int64_t* __restrict__ out) {
  __shared__ Best part[kThreads / 32];
  const T* row = x + int64_t(blockIdx.x) * n;
  Best b{-INFINITY, n};  // n: no value yet (loses every comparison below, on index)
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float v = to_f(row[i]);
    if (isnan(v)) b.i = -1;
    if (b.i >= 0 && (v > b.v || b.i == n)) b = {v, i};
  }
  for (int o = 16; o > 0; o >>= 1) {
    Best other{__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.i, o)};
    b = better(b, other);
  }
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = b;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) b = better(b, part[w]);
    out[blockIdx.x] = b.i;
  }
}

}  // namespace

std::vector<int64_t> argmax(const Tensor& x) {
  detail::check_act(x, "argmax", "x");
  const int64_t n = x.dim(-1), rows = x.numel() / n;
  ERNIE_CHECK(rows <= INT32_MAX, "argmax: too many rows");
  Tensor idx = Tensor::empty({rows}, DType::I64, x.device());
  cudaStream_t st = stream(detail::dev(x));
  ERNIE_DISPATCH_ACT(x.dtype(), "argmax", {
    argmax_kernel<T><<<unsigned(rows), kThreads, 0, st>>>(x.data<T>(), n, idx.data<int64_t>());
  });
  ERNIE_CUDA_LAUNCH("argmax");
  Tensor host = idx.to(kCPU);
  std::vector<int64_t> best(host.data<int64_t>(), host.data<int64_t>() + rows);
  for (int64_t r = 0; r < rows; ++r)
    ERNIE_CHECK(best[size_t(r)] >= 0, "argmax: row ", std::to_string(r), " holds NaN: the model produced NaN logits");
  return best;
}

}  // namespace ernie::cuda
