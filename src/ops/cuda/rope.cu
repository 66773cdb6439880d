// Rotate-half RoPE on x [B, S, heads, D] with full-width F32 tables cos/sin [B or 1, S, D]:
//   out[i] = x[i]·cos[i] + rot(x)[i]·sin[i],  rot(x) = concat(-x[D/2:], x[:D/2]).
// One thread per (row, pair): it reads x[j] and x[j + D/2] and writes both outputs.
#include "ops/cuda/common.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/shape_rules.h"

namespace ernie::cuda {

namespace {

template <class T>
__global__ void rope_kernel(const T* __restrict__ x, const float* __restrict__ cs, const float* __restrict__ sn,
                            T* __restrict__ y, int64_t n_pairs, int heads, int half, int64_t seq, int64_t table_b) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n_pairs; p += int64_t(gridDim.x) * blockDim.x) {
    const int j = int(p % half);
    const int64_t row = p / half;           // (b, s, h)
    const int64_t bs = row / heads;         // (b, s)
    const int64_t b = bs / seq, s = bs % seq;
    const int64_t t = b * table_b + s * 2 * half;
    const T* xr = x + row * 2 * half;
    T* yr = y + row * 2 * half;
    const float a = to_f(xr[j]), c = to_f(xr[j + half]);
    yr[j] = from_f<T>(a * cs[t + j] - c * sn[t + j]);
    yr[j + half] = from_f<T>(c * cs[t + j + half] + a * sn[t + j + half]);
  }
}

// One thread per (row, pack of P angles in the first half); half % P == 0.
template <class T>
__global__ void rope_vec_kernel(const T* __restrict__ x, const float* __restrict__ cs, const float* __restrict__ sn,
                                T* __restrict__ y, int64_t n_packs, int heads, int half, int64_t seq, int64_t table_b) {
  constexpr int P = kPack<T>;
  const int ppr = half / P;  // packs per half row
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n_packs; p += int64_t(gridDim.x) * blockDim.x) {
    const int j = int(p % ppr) * P;
    const int64_t row = p / ppr, bs = row / heads, b = bs / seq, s = bs % seq;
    const int64_t t = b * table_b + s * 2 * half;
    const T* xr = x + row * 2 * half;
    T* yr = y + row * 2 * half;
    const Pack<T> a = *reinterpret_cast<const Pack<T>*>(xr + j), c = *reinterpret_cast<const Pack<T>*>(xr + j + half);
    Pack<T> lo, hi;
#pragma unroll
    for (int e = 0; e < P; ++e) {
      const float av = to_f(a.v[e]), cv = to_f(c.v[e]);
      lo.v[e] = from_f<T>(av * cs[t + j + e] - cv * sn[t + j + e]);
      hi.v[e] = from_f<T>(cv * cs[t + j + half + e] + av * sn[t + j + half + e]);
    }
    *reinterpret_cast<Pack<T>*>(yr + j) = lo;
    *reinterpret_cast<Pack<T>*>(yr + j + half) = hi;
  }
}

}  // namespace

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  detail::check_act(x, "rope", "x");
  detail::check_same_device(x, cos, "rope", "cos");
  detail::check_same_device(x, sin, "rope", "sin");
  ERNIE_CHECK(cos.dtype() == DType::F32 && sin.dtype() == DType::F32, "rope: cos/sin tables must be F32");
  ops::rules::rope(x, cos, sin);
  const int64_t b = x.dim(0), s = x.dim(1), h = x.dim(2), d = x.dim(3);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  const int64_t n_pairs = x.numel() / 2;
  if (n_pairs == 0) return y;
  cudaStream_t st = stream(detail::dev(x));
  const int64_t table_b = cos.dim(0) == 1 ? 0 : s * d;
  ERNIE_DISPATCH_ACT(x.dtype(), "rope", {
    if ((d / 2) % kPack<T> == 0 && aligned16(x.raw())) {
      const int64_t n_packs = n_pairs / kPack<T>;
      rope_vec_kernel<T><<<detail::blocks_for(n_packs, 256), 256, 0, st>>>(
          x.data<T>(), cos.data<float>(), sin.data<float>(), y.data<T>(), n_packs, int(h), int(d / 2), s, table_b);
    } else {
      rope_kernel<T><<<detail::blocks_for(n_pairs, 256), 256, 0, st>>>(
          x.data<T>(), cos.data<float>(), sin.data<float>(), y.data<T>(), n_pairs, int(h), int(d / 2), s, table_b);
    }
  });
  ERNIE_CUDA_LAUNCH("rope");
  return y;
}

}  // namespace ernie::cuda
