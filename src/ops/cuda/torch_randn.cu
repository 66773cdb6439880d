// torch.randn with a CUDA generator, as ATen's normal kernel draws it: a grid-stride loop of `blocks` x 256
// threads, thread idx with curand_init(seed, idx, 0) and one curand_normal4 per pass, component k of pass p
// at element idx + stride * (4 p + k); blocks = min(ceil(n / 256), SMs * (max threads per SM / 256)) of this
// device. curand's own Philox and Box-Muller (its __sincosf) make it bit for bit torch's on the same GPU. The
// host twin, engine/rng/torch_cuda_rng.h, computes the same stream with the host's sine (close, not exact).
#include <curand_kernel.h>

#include "ops/cuda/common.h"
#include "ops/cuda/cuda_ops.h"

namespace ernie::cuda {
namespace {

constexpr int kBlock = 256, kUnroll = 4;

template <class T>
__global__ void torch_randn_kernel(T* out, int64_t n, uint64_t seed, int64_t passes) {
  const int64_t idx = int64_t(blockIdx.x) * kBlock + threadIdx.x, stride = int64_t(gridDim.x) * kBlock;
  curandStatePhilox4_32_10_t st;
  curand_init(seed, uint64_t(idx), 0, &st);
  for (int64_t p = 0; p < passes; ++p) {
    const float4 r = curand_normal4(&st);
    const float v[4] = {r.x, r.y, r.z, r.w};
    for (int k = 0; k < kUnroll; ++k) {
      const int64_t i = idx + stride * (kUnroll * p + k);
      if (i < n) out[i] = T(v[k]);
    }
  }
}

}  // namespace

Tensor torch_cuda_randn(int64_t n, uint64_t seed, DType dtype, Device device) {
  ERNIE_CHECK(dtype == DType::F32 || dtype == DType::BF16, "torch cuda randn: dtype ", dtype_name(dtype),
              " is not f32 or bf16");
  ERNIE_CHECK(n >= 1, "torch cuda randn: ", std::to_string(n), " values");
  int per_sm = 0;
  ERNIE_CUDA_CHECK(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, device.index));
  const int64_t blocks = std::min<int64_t>((n + kBlock - 1) / kBlock, int64_t(sm_count(device.index)) * (per_sm / kBlock));
  const int64_t passes = (n - 1) / (blocks * kBlock * kUnroll) + 1;
  Tensor out = Tensor::empty({n}, dtype, device);
  cudaStream_t st = stream(device.index);
  if (dtype == DType::F32)
    torch_randn_kernel<float><<<unsigned(blocks), kBlock, 0, st>>>(out.data<float>(), n, seed, passes);
  else
    torch_randn_kernel<__nv_bfloat16><<<unsigned(blocks), kBlock, 0, st>>>(out.data<__nv_bfloat16>(), n, seed, passes);
  ERNIE_CUDA_LAUNCH("torch_randn_kernel");
  return out;
}

}  // namespace ernie::cuda
