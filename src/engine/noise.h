// The initial noise of a generation, from a seed, by one of three generators (--rng):
// - cpu: torch.randn(shape, generator=torch.Generator("cpu").manual_seed(seed), dtype=dtype), bit for bit
//   (engine/rng/torch_cpu_rng.h). ComfyUI's choice, and the default.
// - cuda: the same with a CUDA generator (Philox4x32-10): on a CUDA device by torch's own kernel scheme,
//   bit for bit (ops::torch_cuda_randn); elsewhere computed on the host (engine/rng/torch_cuda_rng.h), whose
//   sine differs from the GPU's fast one by up to ~2e-6.
// - ernie: this engine's own documented generator (below).
// Batches follow the reference: diffusers' randn_tensor draws the whole [B, ...] batch from one generator, so
// with cpu and cuda image b is row b of one draw (not the image seed + b gives alone); with ernie image b is
// drawn from seed + b, so image b alone with seed + b gives the same noise.
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace ernie {

enum class NoiseRng { Cpu, Cuda, Ernie };

// "cpu", "cuda" or "ernie"; anything else throws Error naming `flag` and the choices.
NoiseRng parse_rng(const std::string& name, const char* flag = "--rng");
const char* rng_name(NoiseRng r);

// [B, ...] standard normal. `dtype` is the dtype torch would draw in (the pipeline's: F32, or BF16 for a bf16
// run): with cpu and cuda, BF16 gives the values torch.randn(..., dtype=torch.bfloat16) gives (cpu draws them
// by its own bf16 path; cuda rounds its f32 values). ernie ignores it. F32 on the host, except cuda on a CUDA
// `device`: then drawn there, in that dtype, on it.
Tensor initial_noise(const Shape& shape, uint64_t seed, NoiseRng rng, DType dtype = DType::F32, Device device = kCPU);

// The seed that reproduces image b of a batch drawn from `seed`: seed + b with ernie; with cpu and cuda the
// batch's seed (image b is row b of that batch's draw).
uint64_t image_seed(uint64_t seed, int b, NoiseRng rng);

// ernie: image b (dim 0) draws its values in row-major order from std::mt19937_64 seeded with seed + b:
// 53-bit uniforms u in (0, 1], pairs (u1, u2) through Box-Muller (r = sqrt(-2 ln u1); r cos(2 pi u2),
// r sin(2 pi u2)).
Tensor initial_noise(const Shape& shape, uint64_t seed);

}  // namespace ernie
