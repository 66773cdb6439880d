// Kernels shared by conv2d's paths (conv_im2col.cu), called from conv.cpp.
#pragma once
#include <cuda_runtime.h>

#include "core/tensor.h"

namespace ernie::cuda {
// x_img [I, H, W] -> col rows [npix, I*kh*kw] for output pixels [p0, p0 + npix) of a Wo-wide output.
void im2col(const Tensor& x_img, Tensor& col, int64_t p0, int64_t npix, int kh, int kw, int stride, int pad, int Wo,
            cudaStream_t st);
// x_img [H, W, I] (NHWC) -> col rows [npix, kh*kw*I], the layout of a weight [O, kh, kw, I].
void im2col_nhwc(const Tensor& x_img, Tensor& col, int64_t p0, int64_t npix, int kh, int kw, int stride, int pad,
                 int Wo, cudaStream_t st);
// src [npix, O] -> dst_img [O, hw] at pixels [p0, p0 + npix).
void scatter_nchw(const Tensor& src, Tensor& dst_img, int64_t p0, int64_t hw, cudaStream_t st);
// y [B, O, H, W] += bias[O].
void add_channel_bias(Tensor& y, const Tensor& bias, cudaStream_t st);
// y [B, H, W, O] += bias[O].
void add_channel_bias_nhwc(Tensor& y, const Tensor& bias, cudaStream_t st);
}  // namespace ernie::cuda
