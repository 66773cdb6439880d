// torch.randn(n, generator=torch.Generator("cuda").manual_seed(seed), device="cuda") computed on the host:
// - ATen's CUDA normal kernel runs a grid-stride loop of `blocks` x 256 threads. Thread idx owns a Philox4x32-10
//   stream, curand_init(seed, subsequence = idx, offset = the generator's offset, 0 for a fresh one).
// - Each pass of the loop takes one curand_normal4 (4 normals from one 128-bit Philox output, Box-Muller on
//   the pairs (x, y) and (z, w), sine first). Component k of pass p goes to element
//   idx + stride * (4 p + k), stride = blocks * 256.
// - blocks = min(ceil(n / 256), SMs * (max threads per SM / 256)), so a tensor larger than 256 x that bound
//   gets device-dependent values in torch itself; `max_blocks` is that bound.
// - bf16 rounds the f32 values (the kernel computes in float).
#pragma once
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace ernie {

// The H200 (132 SMs x 2048 threads / 256): the device torch_rng's fixtures come from.
constexpr int kTorchCudaMaxBlocksH200 = 132 * 8;

std::vector<float> torch_cuda_randn(int64_t n, uint64_t seed, DType dtype, int max_blocks = kTorchCudaMaxBlocksH200);

// One Philox4x32-10 block (Random123): counter c, key k; 10 rounds. Exposed for tests.
void philox4x32_10(const uint32_t c[4], const uint32_t k[2], uint32_t out[4]);

}  // namespace ernie
