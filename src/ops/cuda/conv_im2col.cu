// Kernels of conv2d's portable path (no cuDNN, or ERNIE_CONV=im2col): im2col into pixel-major rows
// [npix, I*kh*kw] (NHWC: [npix, kh*kw*I]) for a GEMM against the weight's rows, the transpose of its
// [npix, O] result into NCHW (NHWC takes it as it is), and a per-channel bias add for the cuDNN path.
#include <algorithm>

#include "ops/cuda/common.h"
#include "ops/cuda/conv_kernels.h"

namespace ernie::cuda {

namespace {

template <class T>
__global__ void im2col_kernel(const T* __restrict__ x, T* __restrict__ col, int64_t p0, int64_t npix, int I, int H,
                              int W, int kh, int kw, int stride, int pad, int Wo) {
  const int64_t K = int64_t(I) * kh * kw, n = npix * K;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t k = i % K, p = p0 + i / K;
    const int c = int(k / (kh * kw)), dy = int(k / kw) % kh, dx = int(k % kw);
    const int oy = int(p / Wo), ox = int(p % Wo);
    const int iy = oy * stride - pad + dy, ix = ox * stride - pad + dx;
    col[i] = (iy >= 0 && iy < H && ix >= 0 && ix < W) ? x[(int64_t(c) * H + iy) * W + ix] : from_f<T>(0.f);
  }
}

// The same from x [H, W, I] (NHWC) into rows [npix, kh*kw*I]: each tap a run of I channels.
template <class T>
__global__ void im2col_nhwc_kernel(const T* __restrict__ x, T* __restrict__ col, int64_t p0, int64_t npix, int I,
                                   int H, int W, int kh, int kw, int stride, int pad, int Wo) {
  const int64_t K = int64_t(I) * kh * kw, n = npix * K;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t k = i % K, p = p0 + i / K;
    const int tap = int(k / I), c = int(k % I), dy = tap / kw, dx = tap % kw;
    const int oy = int(p / Wo), ox = int(p % Wo);
    const int iy = oy * stride - pad + dy, ix = ox * stride - pad + dx;
    col[i] = (iy >= 0 && iy < H && ix >= 0 && ix < W) ? x[(int64_t(iy) * W + ix) * I + c] : from_f<T>(0.f);
  }
}

// src [npix, O] -> dst[o * hw + p0 + p].
template <class T>
__global__ void scatter_nchw_kernel(const T* __restrict__ src, T* __restrict__ dst, int64_t npix, int O, int64_t p0,
                                    int64_t hw) {
  const int64_t n = npix * O;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = i / npix, p = i % npix;
    dst[o * hw + p0 + p] = src[p * O + o];
  }
}

// y[n, o, :, :] += bias[o]: one (n, o) plane per block row, 16-byte packs along it when the plane's size allows.
template <class T>
__global__ void bias_nchw_kernel(T* __restrict__ y, VecF bias, int64_t planes, int O, int64_t hw, bool packed) {
  const int64_t start = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t pl = blockIdx.y; pl < planes; pl += gridDim.y) {
    const float b = bias[int(pl % O)];
    T* plane = y + pl * hw;
    if (packed) {  // y is 16-byte aligned and hw a multiple of the pack: so is every plane
      Pack<T>* packs = reinterpret_cast<Pack<T>*>(plane);
      for (int64_t i = start; i < hw / kPack<T>; i += step) {
        Pack<T> v = packs[i];
#pragma unroll
        for (int e = 0; e < kPack<T>; ++e) v.v[e] = from_f<T>(to_f(v.v[e]) + b);
        packs[i] = v;
      }
    } else {
      for (int64_t i = start; i < hw; i += step) plane[i] = from_f<T>(to_f(plane[i]) + b);
    }
  }
}

// y [rows, O] += bias[O] (NHWC): packs of V channels, which O % V == 0 keeps inside a row.
template <class T, int V>
__global__ void bias_nhwc_kernel(T* __restrict__ y, VecF bias, int64_t packs, int O) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < packs; i += int64_t(gridDim.x) * blockDim.x) {
    const int c0 = int(i * V % O);
    if constexpr (V == 1) {
      y[i] = from_f<T>(to_f(y[i]) + bias[c0]);
    } else {
      Pack<T>* p = reinterpret_cast<Pack<T>*>(y) + i;
      Pack<T> v = *p;
#pragma unroll
      for (int e = 0; e < V; ++e) v.v[e] = from_f<T>(to_f(v.v[e]) + bias[c0 + e]);
      *p = v;
    }
  }
}

}  // namespace

void im2col_nhwc(const Tensor& x_img, Tensor& col, int64_t p0, int64_t npix, int kh, int kw, int stride, int pad,
                 int Wo, cudaStream_t st) {
  const int H = int(x_img.dim(0)), W = int(x_img.dim(1)), I = int(x_img.dim(2));
  const int64_t n = npix * I * kh * kw;
  ERNIE_DISPATCH_ACT(x_img.dtype(), "conv2d",
                     im2col_nhwc_kernel<T><<<detail::blocks_for(n, 256), 256, 0, st>>>(
                         x_img.data<T>(), col.data<T>(), p0, npix, I, H, W, kh, kw, stride, pad, Wo));
  ERNIE_CUDA_LAUNCH("conv2d im2col");
}

void add_channel_bias_nhwc(Tensor& y, const Tensor& bias, cudaStream_t st) {
  const int64_t O = y.dim(-1), n = y.numel();
  if (n == 0) return;
  ERNIE_DISPATCH_ACT(y.dtype(), "conv2d", {
    if (O % kPack<T> == 0 && aligned16(y.raw())) {
      bias_nhwc_kernel<T, kPack<T>><<<detail::blocks_for(n / kPack<T>, 256), 256, 0, st>>>(y.data<T>(), vec(bias),
                                                                                          n / kPack<T>, int(O));
    } else {
      bias_nhwc_kernel<T, 1><<<detail::blocks_for(n, 256), 256, 0, st>>>(y.data<T>(), vec(bias), n, int(O));
    }
  });
  ERNIE_CUDA_LAUNCH("conv2d bias");
}

void im2col(const Tensor& x_img, Tensor& col, int64_t p0, int64_t npix, int kh, int kw, int stride, int pad, int Wo,
            cudaStream_t st) {
  const int I = int(x_img.dim(0)), H = int(x_img.dim(1)), W = int(x_img.dim(2));
  const int64_t n = npix * I * kh * kw;
  ERNIE_DISPATCH_ACT(x_img.dtype(), "conv2d",
                     im2col_kernel<T><<<detail::blocks_for(n, 256), 256, 0, st>>>(x_img.data<T>(), col.data<T>(), p0,
                                                                                  npix, I, H, W, kh, kw, stride, pad, Wo));
  ERNIE_CUDA_LAUNCH("conv2d im2col");
}

void scatter_nchw(const Tensor& src, Tensor& dst_img, int64_t p0, int64_t hw, cudaStream_t st) {
  const int64_t npix = src.dim(0);
  const int O = int(src.dim(1));
  ERNIE_DISPATCH_ACT(src.dtype(), "conv2d",
                     scatter_nchw_kernel<T><<<detail::blocks_for(npix * O, 256), 256, 0, st>>>(
                         src.data<T>(), dst_img.data<T>(), npix, O, p0, hw));
  ERNIE_CUDA_LAUNCH("conv2d scatter");
}

void add_channel_bias(Tensor& y, const Tensor& bias, cudaStream_t st) {
  const int64_t O = y.dim(1), hw = y.dim(2) * y.dim(3), planes = y.dim(0) * O;
  if (y.numel() == 0) return;
  ERNIE_DISPATCH_ACT(y.dtype(), "conv2d", {
    const bool packed = hw % kPack<T> == 0 && aligned16(y.raw());
    const dim3 grid(std::min(detail::blocks_for(hw / kPack<T> + 1, 256), 64u), unsigned(std::min<int64_t>(planes, 65535)));
    bias_nchw_kernel<T><<<grid, 256, 0, st>>>(y.data<T>(), vec(bias), planes, int(O), hw, packed);
  });
  ERNIE_CUDA_LAUNCH("conv2d bias");
}

}  // namespace ernie::cuda
