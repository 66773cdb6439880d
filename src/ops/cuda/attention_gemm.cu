// Attention as two GEMMs around a row softmax, for head sizes the flash kernel does not take (the VAE's
// single 512-wide head over 16 k tokens) and long f32 sequences: S = q·kᵀ in fp32 (cuBLASLt), P =
// softmax(S·scale) masked (kv_len, causal) in the activation dtype, O = P·v. Query rows run in chunks so
// S stays under 1 GiB.
#include <algorithm>
#include <cmath>

#include "ops/cuda/attention_internal.h"
#include "ops/cuda/common.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/gemm.h"

namespace ernie::cuda::attn {

namespace {

constexpr int kThreads = 256;

__device__ float block_reduce(float v, float* sh, bool is_max) {
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, w) : v + w;
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = v;
  __syncthreads();
  float r = sh[0];
  for (int i = 1; i < kThreads / 32; ++i) r = is_max ? fmaxf(r, sh[i]) : r + sh[i];
  return r;
}

// One block per row of S [rows, Sk] (fp32): keys >= limit(row) are masked; an empty row gives zeros.
template <class T>
__global__ void softmax_rows_kernel(const float* __restrict__ S, T* __restrict__ P, int Sk, float scale, int kv_len,
                                    bool causal, int64_t first_pos) {
  __shared__ float sh[kThreads / 32];
  const int64_t row = blockIdx.x;
  int64_t limit = kv_len;
  if (causal) limit = min(limit, first_pos + row + 1);
  const int n = limit > 0 ? int(limit) : 0;
  const float* s = S + row * Sk;
  T* p = P + row * Sk;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < n; j += kThreads) mx = fmaxf(mx, s[j] * scale);
  mx = block_reduce(mx, sh, true);
  float sum = 0.f;
  for (int j = threadIdx.x; j < n; j += kThreads) sum += __expf(s[j] * scale - mx);
  sum = block_reduce(sum, sh, false);
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
  for (int j = threadIdx.x; j < Sk; j += kThreads) p[j] = from_f<T>(j < n ? __expf(s[j] * scale - mx) * inv : 0.f);
}

}  // namespace

// q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D] (contiguous), out like q.
void gemm_path(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, float scale, const ops::AttentionMask& m) {
  const int64_t B = q.dim(0), Sq = q.dim(1), Hq = q.dim(2), D = q.dim(3), Sk = k.dim(1), Hkv = k.dim(2);
  const DType dt = q.dtype();
  // Heads to the front: [B, H, S, D], so each (b, h) is a contiguous [S, D] matrix; vᵀ per head: [B, H, D, Sk].
  const Tensor qh = Hq == 1 ? q.reshape({B, 1, Sq, D}) : permute(q, {0, 2, 1, 3});
  const Tensor kh = Hkv == 1 ? k.reshape({B, 1, Sk, D}) : permute(k, {0, 2, 1, 3});
  const Tensor vt = permute(v, {0, 2, 3, 1});
  Tensor oh = Tensor::empty({B, Hq, Sq, D}, dt, q.device());
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(Sq, (int64_t(1) << 28) / std::max<int64_t>(Sk, 1)));
  cudaStream_t st = stream(detail::dev(q));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t g = h / (Hq / Hkv);
      const Tensor qm = qh.reshape({B * Hq * Sq, D}).narrow((b * Hq + h) * Sq, Sq);
      const Tensor km = kh.reshape({B * Hkv * Sk, D}).narrow((b * Hkv + g) * Sk, Sk);
      const Tensor vm = vt.reshape({B * Hkv * D, Sk}).narrow((b * Hkv + g) * D, D);
      Tensor om = oh.reshape({B * Hq * Sq, D}).narrow((b * Hq + h) * Sq, Sq);
      const int kv_len = int(m.kv_len.empty() ? Sk : m.kv_len[size_t(b)]);
      for (int64_t r0 = 0; r0 < Sq; r0 += chunk) {
        const int64_t nr = std::min(chunk, Sq - r0);
        const Tensor S = matmul_nt(qm.narrow(r0, nr), km, DType::F32);  // [nr, Sk]
        Tensor P = Tensor::empty({nr, Sk}, dt, q.device());
        ERNIE_DISPATCH_ACT(dt, "attention",
                           softmax_rows_kernel<T><<<unsigned(nr), kThreads, 0, st>>>(
                               S.data<float>(), P.data<T>(), int(Sk), scale, kv_len, m.causal, m.q_offset + r0));
        ERNIE_CUDA_LAUNCH("attention softmax");
        Tensor o = om.narrow(r0, nr);
        gemm_nt(P, vm, Tensor(), o, nr, D, Sk);  // [nr, Sk] · [D, Sk]ᵀ
      }
    }
  Tensor r = Hq == 1 ? oh.reshape(q.shape()) : permute(oh, {0, 2, 1, 3});
  ERNIE_CUDA_CHECK(cudaMemcpyAsync(out.raw(), r.raw(), out.nbytes(), cudaMemcpyDeviceToDevice, st));
}

}  // namespace ernie::cuda::attn
