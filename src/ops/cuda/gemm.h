// GEMM entry points inside the CUDA backend (gemm.cpp), beyond ops::linear.
#pragma once
#include "core/tensor.h"

namespace ernie::cuda {
// y[M, N] = x[M, K] · w[N, K]ᵀ (+ b[N]); x and w share a dtype, y may be F32 (fp32 output from bf16 inputs).
void gemm_nt(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, int64_t M, int64_t N, int64_t K);
// The same for M <= 4 rows by our GEMV kernel (gemv.cu), when gemv_supported: x and w of one activation
// dtype, K a multiple of the 16-byte pack, aligned.
bool gemv_supported(const Tensor& x, const Tensor& w, int64_t M);
void gemv(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, int64_t M, int64_t N, int64_t K);
// a[M, K] · b[N, K]ᵀ -> [M, N] in `out` (F32 or a's dtype).
Tensor matmul_nt(const Tensor& a, const Tensor& b, DType out);
}  // namespace ernie::cuda
