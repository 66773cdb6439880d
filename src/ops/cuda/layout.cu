// Layout ops: permute (up to 6 dims), concat and slice (strided 2-D copies), zero padding, nearest 2x
// upsampling and embedding lookup. Byte moves for any element size, except embedding which converts.
#include <array>
#include <vector>

#include "ops/cuda/common.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/shape_rules.h"

namespace ernie::cuda {

namespace {

constexpr int kThreads = 256;

struct Dims6 {
  int64_t out[6];     // output sizes (leading 1s)
  int64_t stride[6];  // input stride (elements) of each output dim
};

template <class E>
__global__ void permute_kernel(const E* __restrict__ x, E* __restrict__ y, int64_t n, Dims6 d) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = i, off = 0;
#pragma unroll
    for (int k = 5; k >= 0; --k) {
      const int64_t c = r % d.out[k];
      r /= d.out[k];
      off += c * d.stride[k];
    }
    y[i] = x[off];
  }
}

// planes of [H, W] -> [H + top + bottom, W + left + right], zeros outside.
template <class E>
__global__ void pad2d_kernel(const E* __restrict__ x, E* __restrict__ y, int64_t n, int64_t H, int64_t W, int64_t Hn,
                             int64_t Wn, int top, int left) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % Wn, r = (i / Wn) % Hn, p = i / (Wn * Hn);
    const int64_t sr = r - top, sc = c - left;
    y[i] = (sr >= 0 && sr < H && sc >= 0 && sc < W) ? x[(p * H + sr) * W + sc] : E(0);
  }
}

// Rows of W elements whose size is a multiple of 8 bytes: each thread writes one 16-byte pack of an output
// row (kOut elements) from 8 bytes of the input row above it.
template <class E>
__global__ void upsample2x_packed_kernel(const E* __restrict__ x, E* __restrict__ y, int64_t rows_out, int64_t H, int64_t W) {
  constexpr int kOut = int(16 / sizeof(E));
  struct alignas(16) Out { E v[kOut]; };
  struct alignas(8) In { E v[kOut / 2]; };
  const int64_t packs = 2 * W / kOut, n = rows_out * packs;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ro = i / packs, cp = i % packs, plane = ro / (2 * H), r = ro % (2 * H);
    const In a = *reinterpret_cast<const In*>(x + (plane * H + r / 2) * W + cp * (kOut / 2));
    Out o;
#pragma unroll
    for (int e = 0; e < kOut / 2; ++e) o.v[2 * e] = o.v[2 * e + 1] = a.v[e];
    *reinterpret_cast<Out*>(y + ro * 2 * W + cp * kOut) = o;
  }
}

template <class E>
__global__ void upsample2x_kernel(const E* __restrict__ x, E* __restrict__ y, int64_t n, int64_t H, int64_t W) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % (2 * W), r = (i / (2 * W)) % (2 * H), p = i / (4 * H * W);
    y[i] = x[(p * H + r / 2) * W + c / 2];
  }
}

// NHWC [B, H, W, C] -> [B, 2H, 2W, C]: output pixel (p, r, c) is input pixel (p, r / 2, c / 2), each a run of
// `cu` units (16-byte packs when the pixel's bytes allow, else elements).
template <class U>
__global__ void upsample2x_nhwc_kernel(const U* __restrict__ x, U* __restrict__ y, int64_t n, int64_t H, int64_t W,
                                       int64_t cu) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t k = i % cu, q = i / cu, c = q % (2 * W), r = (q / (2 * W)) % (2 * H), p = q / (4 * H * W);
    y[i] = x[((p * H + r / 2) * W + c / 2) * cu + k];
  }
}

template <class S, class D>
__global__ void gather_rows_kernel(const S* __restrict__ table, const int64_t* __restrict__ ids, D* __restrict__ y,
                                   int64_t n, int64_t C, int64_t V) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / C, c = i % C, id = ids[r];
    y[i] = from_f<D>(id >= 0 && id < V ? to_f(table[id * C + c]) : 0.f);  // ids checked on the host, or from argmax
  }
}

// Calls f.template operator()<E>() with E an unsigned integer of the element size.
template <class F>
void by_size(DType t, F&& f) {
  switch (dtype_size(t)) {
    case 1: f(uint8_t{}); break;
    case 2: f(uint16_t{}); break;
    case 4: f(uint32_t{}); break;
    default: f(uint64_t{}); break;
  }
}

void check_cuda(const Tensor& x, const char* op, const char* what) {
  ERNIE_CHECK(x.defined(), op, ": ", what, " is undefined");
  ERNIE_CHECK(x.device().is_cuda(), op, ": ", what, " is on ", x.device().str(), ", expected a CUDA device");
}

}  // namespace

Tensor permute(const Tensor& x, const std::vector<int>& dims) {
  check_cuda(x, "permute", "x");
  const ops::rules::Permute6 p = ops::rules::permute6(x, dims);
  Dims6 d;
  for (int k = 0; k < 6; ++k) d.out[k] = p.out[size_t(k)], d.stride[k] = p.stride[size_t(k)];
  Tensor y = Tensor::empty(p.out_shape, x.dtype(), x.device());
  const int64_t n = y.numel();
  if (n == 0) return y;
  cudaStream_t st = stream(detail::dev(x));
  by_size(x.dtype(), [&](auto e) {
    using E = decltype(e);
    permute_kernel<E><<<detail::blocks_for(n, kThreads), kThreads, 0, st>>>(x.data<E>(), y.data<E>(), n, d);
  });
  ERNIE_CUDA_LAUNCH("permute");
  return y;
}

Tensor concat(const std::vector<Tensor>& xs, int dim) {
  for (const Tensor& t : xs) check_cuda(t, "concat", "input");
  const ops::rules::RowCopy r = ops::rules::concat(xs, dim);
  const Tensor& x0 = xs[0];
  Tensor y = Tensor::empty(r.out_shape, x0.dtype(), x0.device());
  if (y.numel() == 0) return y;
  const int64_t out_row = r.out_shape[size_t(r.dim)] * r.inner;
  cudaStream_t st = stream(detail::dev(x0));
  int64_t off = 0;
  for (const Tensor& t : xs) {
    const int64_t row = t.dim(r.dim) * r.inner;
    if (row > 0)
      ERNIE_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(y.raw()) + off, size_t(out_row), t.raw(), size_t(row),
                                         size_t(row), size_t(r.outer), cudaMemcpyDeviceToDevice, st));
    off += row;
  }
  return y;
}

Tensor slice(const Tensor& x, int dim, int64_t start, int64_t len) {
  check_cuda(x, "slice", "x");
  const ops::rules::RowCopy r = ops::rules::slice(x, dim, start, len);
  Tensor y = Tensor::empty(r.out_shape, x.dtype(), x.device());
  if (y.numel() == 0) return y;
  const int64_t inner = r.inner;
  ERNIE_CUDA_CHECK(cudaMemcpy2DAsync(y.raw(), size_t(len * inner), static_cast<const char*>(x.raw()) + start * inner,
                                     size_t(x.dim(r.dim) * inner), size_t(len * inner), size_t(r.outer),
                                     cudaMemcpyDeviceToDevice, stream(detail::dev(x))));
  return y;
}

Tensor pad2d(const Tensor& x, int left, int right, int top, int bottom) {
  detail::check_act(x, "pad2d", "x");
  const Shape s = ops::rules::pad2d(x, left, right, top, bottom);
  const int64_t H = x.dim(-2), W = x.dim(-1);
  Tensor y = Tensor::empty(s, x.dtype(), x.device());
  const int64_t n = y.numel();
  if (n == 0) return y;
  cudaStream_t st = stream(detail::dev(x));
  by_size(x.dtype(), [&](auto e) {
    using E = decltype(e);
    pad2d_kernel<E><<<detail::blocks_for(n, kThreads), kThreads, 0, st>>>(x.data<E>(), y.data<E>(), n, H, W, s[s.size() - 2],
                                                                        s.back(), top, left);
  });
  ERNIE_CUDA_LAUNCH("pad2d");
  return y;
}

Tensor upsample_nearest2x(const Tensor& x, ops::Layout layout) {
  detail::check_act(x, "upsample_nearest2x", "x");
  const Shape s = ops::rules::upsample_nearest2x(x, layout);
  Tensor y = Tensor::empty(s, x.dtype(), x.device());
  const int64_t n = y.numel();
  if (n == 0) return y;
  cudaStream_t st = stream(detail::dev(x));
  if (layout == ops::Layout::NHWC) {
    const int64_t H = x.dim(1), W = x.dim(2), row = x.dim(3) * int64_t(dtype_size(x.dtype()));
    if (row % 16 == 0 && aligned16(x.raw()) && aligned16(y.raw())) {
      const int64_t units = int64_t(y.nbytes()) / 16;
      upsample2x_nhwc_kernel<uint4><<<detail::blocks_for(units, kThreads), kThreads, 0, st>>>(
          static_cast<const uint4*>(x.raw()), static_cast<uint4*>(y.raw()), units, H, W, row / 16);
    } else {
      by_size(x.dtype(), [&](auto e) {
        using E = decltype(e);
        upsample2x_nhwc_kernel<E><<<detail::blocks_for(n, kThreads), kThreads, 0, st>>>(x.data<E>(), y.data<E>(), n, H,
                                                                                         W, x.dim(3));
      });
    }
    ERNIE_CUDA_LAUNCH("upsample_nearest2x");
    return y;
  }
  const int64_t H = x.dim(-2), W = x.dim(-1);
  by_size(x.dtype(), [&](auto e) {
    using E = decltype(e);
    constexpr int64_t kIn = 8 / int64_t(sizeof(E));  // input elements per 8 bytes
    if (sizeof(E) <= 8 && W % kIn == 0 && aligned16(x.raw()) && aligned16(y.raw())) {
      const int64_t rows_out = n / (2 * W);
      upsample2x_packed_kernel<E><<<detail::blocks_for(n / (2 * kIn), kThreads), kThreads, 0, st>>>(
          x.data<E>(), y.data<E>(), rows_out, H, W);
    } else {
      upsample2x_kernel<E><<<detail::blocks_for(n, kThreads), kThreads, 0, st>>>(x.data<E>(), y.data<E>(), n, H, W);
    }
  });
  ERNIE_CUDA_LAUNCH("upsample_nearest2x");
  return y;
}

Tensor embedding(const Tensor& table, const std::vector<int64_t>& ids, Device device, DType act) {
  ERNIE_CHECK(table.defined(), "embedding: table is undefined");
  ERNIE_CHECK(device.is_cuda(), "embedding: target device ", device.str(), " is not a CUDA device");
  ERNIE_CHECK(act == DType::F32 || act == DType::BF16, "embedding: activations must be F32 or BF16, not ",
              dtype_name(act));
  ERNIE_CHECK(table.ndim() == 2, "embedding: table ", shape_str(table.shape()), " must be [vocab, C]");
  elem_type(table.dtype(), "embedding");
  const int64_t V = table.dim(0), C = table.dim(1), n = int64_t(ids.size());
  for (int64_t id : ids)
    ERNIE_CHECK(id >= 0 && id < V, "embedding: token id ", std::to_string(id), " outside the vocabulary [0, ",
                std::to_string(V), ")");
  if (table.device().is_cpu()) {  // gather on the host (the table is an mmap), convert, upload
    Tensor h = Tensor::empty({n, C}, DType::F32);
    const char* tp = static_cast<const char*>(table.raw());
    const size_t row = size_t(C) * dtype_size(table.dtype());
    for (int64_t i = 0; i < n; ++i)
      convert_to_f32(table.dtype(), tp + size_t(ids[size_t(i)]) * row, h.data<float>() + i * C, size_t(C));
    if (act != DType::F32) h = h.cast(act);
    return h.to(device);
  }
  ERNIE_CHECK(table.device() == device, "embedding: table on ", table.device().str(), ", output wanted on ",
              device.str());
  if (n == 0 || C == 0) return Tensor::empty({n, C}, act, device);
  Tensor ids_h = Tensor::empty({n}, DType::I64);
  std::copy(ids.begin(), ids.end(), ids_h.data<int64_t>());
  return embedding(table, ids_h.to(device), act);
}

Tensor embedding(const Tensor& table, const Tensor& ids, DType act) {
  ERNIE_CHECK(table.defined() && table.ndim() == 2 && table.device().is_cuda(), "embedding: table must be [vocab, C] on a CUDA device");
  ERNIE_CHECK(ids.defined() && ids.dtype() == DType::I64 && ids.ndim() == 1 && ids.device() == table.device(),
              "embedding: ids must be I64 [n] on the table's device");
  ERNIE_CHECK(act == DType::F32 || act == DType::BF16, "embedding: activations must be F32 or BF16, not ",
              dtype_name(act));
  elem_type(table.dtype(), "embedding");
  const Device device = table.device();
  const int64_t V = table.dim(0), C = table.dim(1), n = ids.numel();
  Tensor y = Tensor::empty({n, C}, act, device);
  if (y.numel() == 0) return y;
  cudaStream_t st = stream(device.index);
  const int64_t total = n * C;
  const unsigned g = detail::blocks_for(total, kThreads);
  auto run = [&](auto src) {
    using S = decltype(src);
    if (act == DType::F32)
      gather_rows_kernel<S, float><<<g, kThreads, 0, st>>>(table.data<S>(), ids.data<int64_t>(), y.data<float>(), total, C,
                                                           V);
    else
      gather_rows_kernel<S, __nv_bfloat16><<<g, kThreads, 0, st>>>(table.data<S>(), ids.data<int64_t>(),
                                                                   y.data<__nv_bfloat16>(), total, C, V);
  };
  switch (table.dtype()) {
    case DType::F32: run(float{}); break;
    case DType::BF16: run(__nv_bfloat16{}); break;
    default: run(__half{}); break;
  }
  ERNIE_CUDA_LAUNCH("embedding");
  return y;
}

}  // namespace ernie::cuda
