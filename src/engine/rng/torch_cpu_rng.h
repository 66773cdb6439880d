// torch.randn(n, generator=torch.Generator("cpu").manual_seed(seed), dtype=...) on the host, bit for bit
// (ATen's CPU normal kernel):
// - the generator is a 32-bit mt19937 seeded with the seed's low 32 bits;
// - n >= 16 (the vectorised path): every value first gets a uniform u = (r & (2^d - 1)) * 2^-d from one 32-bit
//   draw r (d = 24 for f32, 8 for bf16), then each chunk of 16 becomes normals by Box-Muller, element j paired
//   with j + 8: radius = sqrt(-2 log(1 - u_j)), theta = 2 pi u_{j+8}; out_j = radius cos(theta),
//   out_{j+8} = radius sin(theta). With n % 16 != 0 the last 16 values are drawn again (16 new uniforms) and
//   transformed. f32 takes log and sincos from ATen's avx_mathfun.h (Cephes polynomials) with the fused
//   multiply-adds GCC's contraction gives its AVX2 build; bf16 computes each operation in float (libm) and
//   rounds it to bf16;
// - n < 16 (the scalar path): at::normal_distribution<double>: two 53-bit uniforms per pair from 64-bit draws
//   (two 32-bit draws, the first the high word), r = sqrt(-2 log1p(-u2)), theta = 2 pi u1, r cos(theta) now
//   and r sin(theta) cached for the next value; rounded to the dtype.
#pragma once
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace ernie {

// The n values as floats (bf16 values when dtype is BF16). dtype: F32 or BF16.
std::vector<float> torch_cpu_randn(int64_t n, uint64_t seed, DType dtype);

}  // namespace ernie
