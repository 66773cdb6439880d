// 8-bit helpers inside the CUDA backend (quantize.cu), used by the quantized linear (gemm.cpp).
#pragma once
#include "core/tensor.h"

namespace ernie::cuda {
// q [rows, cols] (I8 or F8_E4M3) · scale[row] (undefined: 1) as `out` (F32 or BF16).
Tensor dequantize_as(const Tensor& q, const Tensor& scale, DType out);
// y[m, n] = y[m, n] · sx[m] · sw[n] (+ bias[n]) in place; y F32 or BF16 [..., N], sx [M] (undefined: 1) and sw [N] F32.
void scale_rows_cols(Tensor& y, const Tensor& sx, const Tensor& sw, const Tensor& bias);
}  // namespace ernie::cuda
