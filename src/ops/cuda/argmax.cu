// argmax over the last dim: blocks over contiguous segments of a row, then one block per row over their
// results; each thread keeps the first index of its largest value, and (value, index) pairs reduce
// preferring the larger value and, on ties, the smaller index. A NaN
// makes the row's answer -1, which the host turns into an error. Only the indices travel back.
#include <algorithm>
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

// The block's best, in thread 0.
__device__ Best block_best(Best b, Best* warp_best) {
  for (int o = 16; o > 0; o >>= 1) {
    Best other{__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.i, o)};
    b = better(b, other);
  }
  if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = b;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < kThreads / 32; ++w) b = better(b, warp_best[w]);
  return b;
}

// Block (r, b) takes segment b of row r, [b·seg, (b+1)·seg), and writes its best to part[r, b].
template <class T>
__global__ void argmax_kernel(const T* __restrict__ x, int64_t n, int64_t seg, Best* __restrict__ part) {
  __shared__ Best warp_best[kThreads / 32];
  const T* row = x + int64_t(blockIdx.x) * n;
  const int64_t i0 = blockIdx.y * seg, i1 = min(n, i0 + seg);
  Best b{-INFINITY, n};  // n: no value yet (loses every comparison below, on index)
  for (int64_t i = i0 + threadIdx.x; i < i1; i += kThreads) {
    const float v = to_f(row[i]);
    if (isnan(v)) b.i = -1;
    if (b.i >= 0 && (v > b.v || b.i == n)) b = {v, i};
  }
  b = block_best(b, warp_best);
  if (threadIdx.x == 0) part[int64_t(blockIdx.x) * gridDim.y + blockIdx.y] = b;
}

// One block per row over its `blocks` partial results.
__global__ void argmax_merge_kernel(const Best* __restrict__ part, int blocks, int64_t n, int64_t* __restrict__ out) {
  __shared__ Best warp_best[kThreads / 32];
  Best b{-INFINITY, n};
  for (int i = threadIdx.x; i < blocks; i += kThreads) b = better(b, part[int64_t(blockIdx.x) * blocks + i]);
  b = block_best(b, warp_best);
  if (threadIdx.x == 0) out[blockIdx.x] = b.i;
}

}  // namespace

Tensor argmax_indices(const Tensor& x) {
  detail::check_act(x, "argmax", "x");
  const int64_t n = x.dim(-1), rows = x.numel() / n;
  ERNIE_CHECK(rows <= INT32_MAX, "argmax: too many rows");
  // Segments of at least 4096 values, at most 128 per row (a vocabulary of 131072: 32 blocks).
  const int blocks = int(std::min<int64_t>(128, (n + 4095) / 4096));
  const int64_t seg = (n + blocks - 1) / blocks;
  Tensor idx = Tensor::empty({rows}, DType::I64, x.device());
  Tensor part = Tensor::empty({rows * blocks * int64_t(sizeof(Best))}, DType::U8, x.device());
  cudaStream_t st = stream(detail::dev(x));
  ERNIE_DISPATCH_ACT(x.dtype(), "argmax", {
    argmax_kernel<T><<<dim3(unsigned(rows), unsigned(blocks)), kThreads, 0, st>>>(x.data<T>(), n, seg,
                                                                                 part.data<Best>());
  });
  ERNIE_CUDA_LAUNCH("argmax");
  argmax_merge_kernel<<<unsigned(rows), kThreads, 0, st>>>(part.data<Best>(), blocks, n, idx.data<int64_t>());
  ERNIE_CUDA_LAUNCH("argmax");
  return idx;
}

std::vector<int64_t> argmax(const Tensor& x) {
  Tensor host = argmax_indices(x).to(kCPU);
  const int64_t rows = host.numel();
  std::vector<int64_t> best(host.data<int64_t>(), host.data<int64_t>() + rows);
  for (int64_t r = 0; r < rows; ++r)
    ERNIE_CHECK(best[size_t(r)] >= 0, "argmax: row ", std::to_string(r), " holds NaN: the model produced NaN logits");
  return best;
}

}  // namespace ernie::cuda
