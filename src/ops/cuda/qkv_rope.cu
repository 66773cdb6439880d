// qkv_rope: the split of a fused q|k|v projection, RoPE of q and of k (each with its own tables) and the copy
// of v, in one launch. One thread per (token, head slot, pack of P rotation pairs): it reads x[j..j+P) and
// x[j+D/2..) of its head and writes both halves, into q, k or v by the slot. Assumes D even (checked by the
// shape rule) and, for P > 1, (D/2) % P == 0 with 16-byte aligned rows everywhere.
#include <type_traits>

#include "ops/cuda/common.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/pdl.cuh"
#include "ops/shape_rules.h"

namespace ernie::cuda {

namespace {

template <class T, int P>
struct alignas(sizeof(T) * P) Elems {
  T v[P];
};

struct Table {
  const float* cos;
  const float* sin;
  int64_t batch_stride;  // 0 when one table row serves every batch row
};

template <class T, int P>
__global__ void qkv_rope_kernel(const T* __restrict__ qkv, Table tq, Table tk, T* __restrict__ q, T* __restrict__ k,
                                T* __restrict__ v, int64_t n, int hq, int hkv, int half, int64_t seq) {
  using E = Elems<T, P>;
  pdl_wait();
  pdl_launch_dependents();
  const int ppr = half / P, slots = hq + 2 * hkv, D = 2 * half;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n; p += int64_t(gridDim.x) * blockDim.x) {
    const int j = int(p % ppr) * P;
    const int64_t r = p / ppr;  // (token, slot): the source head row starts at r·D
    const int slot = int(r % slots);
    const int64_t bs = r / slots;
    const T* src = qkv + r * D;
    const E a = *reinterpret_cast<const E*>(src + j), c = *reinterpret_cast<const E*>(src + j + half);
    if (slot >= hq + hkv) {  // v: copied
      T* dst = v + (bs * hkv + (slot - hq - hkv)) * D;
      *reinterpret_cast<E*>(dst + j) = a;
      *reinterpret_cast<E*>(dst + j + half) = c;
      continue;
    }
    const bool is_q = slot < hq;
    const Table t = is_q ? tq : tk;
    T* dst = is_q ? q + (bs * hq + slot) * D : k + (bs * hkv + (slot - hq)) * D;
    const int64_t row = (bs / seq) * t.batch_stride + (bs % seq) * D;
    const float* cs = t.cos + row;
    const float* sn = t.sin + row;
    E lo, hi;
#pragma unroll
    for (int e = 0; e < P; ++e) {
      const float av = to_f(a.v[e]), cv = to_f(c.v[e]);
      lo.v[e] = from_f<T>(av * cs[j + e] - cv * sn[j + e]);
      hi.v[e] = from_f<T>(cv * cs[j + half + e] + av * sn[j + half + e]);
    }
    *reinterpret_cast<E*>(dst + j) = lo;
    *reinterpret_cast<E*>(dst + j + half) = hi;
  }
}

}  // namespace

ops::Qkv qkv_rope(const Tensor& qkv, int64_t heads_q, int64_t heads_kv, const Tensor& cos_q, const Tensor& sin_q,
                  const Tensor& cos_k, const Tensor& sin_k, const Tensor& k_out, const Tensor& v_out) {
  detail::check_act(qkv, "qkv_rope", "qkv");
  for (const Tensor* t : {&cos_q, &sin_q, &cos_k, &sin_k}) {
    detail::check_same_device(qkv, *t, "qkv_rope", "table");
    ERNIE_CHECK(t->dtype() == DType::F32, "qkv_rope: cos/sin tables must be F32");
  }
  for (const Tensor* t : {&k_out, &v_out})
    if (t->defined()) detail::check_same_device(qkv, *t, "qkv_rope", "output");
  const int64_t D = ops::rules::qkv_rope(qkv, heads_q, heads_kv, cos_q, sin_q, cos_k, sin_k, k_out, v_out);
  const int64_t B = qkv.dim(0), S = qkv.dim(1);
  ERNIE_CHECK(heads_q + 2 * heads_kv <= INT32_MAX && D <= INT32_MAX, "qkv_rope: sizes too large");
  ops::Qkv r{Tensor::empty({B, S, heads_q, D}, qkv.dtype(), qkv.device()),
             k_out.defined() ? k_out : Tensor::empty({B, S, heads_kv, D}, qkv.dtype(), qkv.device()),
             v_out.defined() ? v_out : Tensor::empty({B, S, heads_kv, D}, qkv.dtype(), qkv.device())};
  const int64_t pairs = B * S * (heads_q + 2 * heads_kv) * (D / 2);
  if (pairs == 0) return r;
  cudaStream_t st = stream(detail::dev(qkv));
  auto table = [&](const Tensor& c, const Tensor& s) {
    return Table{c.data<float>(), s.data<float>(), c.dim(0) == 1 ? 0 : S * D};
  };
  const Table tq = table(cos_q, sin_q), tk = table(cos_k, sin_k);
  ERNIE_DISPATCH_ACT(qkv.dtype(), "qkv_rope", {
    auto run = [&](auto pc) {
      constexpr int P = decltype(pc)::value;
      const int64_t n = pairs / P;
      launch_kernel(pdl_enabled(detail::dev(qkv)), qkv_rope_kernel<T, P>, dim3(detail::blocks_for(n, 256)), dim3(256), 0, st,
                    qkv.data<T>(), tq, tk, r.q.data<T>(), r.k.data<T>(), r.v.data<T>(), n, int(heads_q), int(heads_kv),
                    int(D / 2), S);
    };
    const bool packed = (D / 2) % kPack<T> == 0 && aligned16(qkv.raw()) && aligned16(r.k.raw()) && aligned16(r.v.raw());
    if (packed) run(std::integral_constant<int, kPack<T>>{});
    else run(std::integral_constant<int, 1>{});
  });
  ERNIE_CUDA_LAUNCH("qkv_rope");
  return r;
}

}  // namespace ernie::cuda
