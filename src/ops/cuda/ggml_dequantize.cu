// GGML block-quantized weights (a GGUF DiT) to F32 or BF16 on the GPU, right before the GEMM that reads them:
// the weights stay quantized in memory. One thread per 32-element group, through the same decoders as the
// host (core/ggml_blocks.h; the CPU twin is ops/cpu/ggml_blocks.cpp), built without FMA contraction
// (-fmad=false, CMakeLists) so the F32 values equal the CPU's bit for bit. Stores go out 16 bytes at a time.
#include <cuda_bf16.h>

#include "core/ggml_blocks.h"
#include "ops/cuda/common.h"
#include "ops/cuda/cuda_ops.h"

namespace ernie::cuda {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ void store_group(float* out, const float* v) {
#pragma unroll
  for (int i = 0; i < 32; i += 4) reinterpret_cast<float4*>(out)[i / 4] = make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]);
}
__device__ __forceinline__ void store_group(__nv_bfloat16* out, const float* v) {
#pragma unroll
  for (int i = 0; i < 32; i += 8) {
    uint4 pack;
    uint32_t* w = reinterpret_cast<uint32_t*>(&pack);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const __nv_bfloat162 two = __floats2bfloat162_rn(v[i + 2 * k], v[i + 2 * k + 1]);
      w[k] = *reinterpret_cast<const uint32_t*>(&two);
    }
    reinterpret_cast<uint4*>(out)[i / 8] = pack;
  }
}

template <class Q, class T>
__global__ void dequantize_blocks_kernel(const uint8_t* __restrict__ in, T* __restrict__ out, int64_t groups) {
  constexpr int per_block = Q::block / 32;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < groups; i += int64_t(gridDim.x) * blockDim.x) {
    float v[32];
    Q::group(in + (i / per_block) * Q::bytes, int(i % per_block), v);
    store_group(out + i * 32, v);
  }
}

}  // namespace

Tensor dequantize_blocks(const Tensor& raw, int ggml_type, int64_t cols, DType out) {
  ERNIE_CHECK(out == DType::F32 || out == DType::BF16, "dequantize: output must be F32 or BF16, not ", dtype_name(out));
  ERNIE_CHECK(raw.device().is_cuda(), "dequantize: GGML blocks are on ", raw.device().str(), ", expected a CUDA device");
  Tensor y = Tensor::empty({raw.dim(0), cols}, out, raw.device());
  const int64_t groups = y.numel() / 32;
  if (groups == 0) return y;
  cudaStream_t st = stream(detail::dev(raw));
  const auto* in = static_cast<const uint8_t*>(raw.raw());
  const bool known = ggml::with_type(ggml_type, [&](auto q) {
    using Q = decltype(q);
    const unsigned grid = detail::blocks_for(groups, kThreads);
    if (out == DType::F32)
      dequantize_blocks_kernel<Q><<<grid, kThreads, 0, st>>>(in, static_cast<float*>(y.raw()), groups);
    else
      dequantize_blocks_kernel<Q><<<grid, kThreads, 0, st>>>(in, static_cast<__nv_bfloat16*>(y.raw()), groups);
  });
  ERNIE_CHECK(known, "dequantize: GGML type ", std::to_string(ggml_type), " has no GPU decoder");
  ERNIE_CUDA_LAUNCH("dequantize_blocks");
  return y;
}

}  // namespace ernie::cuda
