// Layout ops: permute (up to 6 dims), concat and slice (strided 2-D copies), zero padding, nearest 2x
// upsampling and embedding lookup. Byte moves for any element size, except embedding which converts.
#include <array>
#include <vector>

#include "ops/cuda/common.h"
#include "ops/cuda/cuda_ops.h"

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

template <class E>
__global__ void upsample2x_kernel(const E* __restrict__ x, E* __restrict__ y, int64_t n, int64_t H, int64_t W) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % (2 * W), r = (i / (2 * W)) % (2 * H), p = i / (4 * H * W);
    y[i] = x[(p * H + r / 2) * W + c / 2];
  }
}

template <class S, class D>
__global__ void gather_rows_kernel(const S* __restrict__ table, const int64_t* __restrict__ ids, D* __restrict__ y,
                                   int64_t n, int64_t C) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / C, c = i % C;
    y[i] = from_f<D>(to_f(table[ids[r] * C + c]));
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

int norm_dim(int dim, int ndim, const char* op, const Shape& s) {
  ERNIE_CHECK(dim >= -ndim && dim < ndim, op, ": dim ", std::to_string(dim), " out of range for ", shape_str(s));
  return dim < 0 ? dim + ndim : dim;
}

}  // namespace

Tensor permute(const Tensor& x, const std::vector<int>& dims) {
  check_cuda(x, "permute", "x");
  const int nd = x.ndim();
  ERNIE_CHECK(int(dims.size()) == nd && nd <= 6, "permute: ", std::to_string(dims.size()), " dims for x ",
              shape_str(x.shape()), " (at most 6)");
  std::array<bool, 6> seen{};
  for (int d : dims) {
    ERNIE_CHECK(d >= 0 && d < nd && !seen[size_t(d)], "permute: dims are not a permutation of 0..",
                std::to_string(nd - 1));
    seen[size_t(d)] = true;
  }
  std::array<int64_t, 6> in_stride{};
  int64_t s = 1;
  for (int i = nd - 1; i >= 0; --i) in_stride[size_t(i)] = s, s *= x.dim(i);
  Dims6 d{{1, 1, 1, 1, 1, 1}, {0, 0, 0, 0, 0, 0}};
  Shape out_shape(static_cast<size_t>(nd));
  for (int i = 0; i < nd; ++i) {
    const int k = 6 - nd + i;
    out_shape[size_t(i)] = x.dim(dims[size_t(i)]);
    d.out[k] = out_shape[size_t(i)];
    d.stride[k] = in_stride[size_t(dims[size_t(i)])];
  }
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
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
  ERNIE_CHECK(!xs.empty(), "concat: no tensors");
  for (const Tensor& t : xs) check_cuda(t, "concat", "input");
  const Tensor& x0 = xs[0];
  const int d = norm_dim(dim, x0.ndim(), "concat", x0.shape());
  Shape s = x0.shape();
  s[size_t(d)] = 0;
  for (const Tensor& t : xs) {
    bool ok = t.ndim() == x0.ndim() && t.dtype() == x0.dtype() && t.device() == x0.device();
    for (int i = 0; ok && i < x0.ndim(); ++i) ok = i == d || t.dim(i) == x0.dim(i);
    ERNIE_CHECK(ok, "concat: ", shape_str(t.shape()), " ", dtype_name(t.dtype()), " on ", t.device().str(),
                " does not match ", shape_str(x0.shape()), " ", dtype_name(x0.dtype()), " outside dim ",
                std::to_string(d));
    s[size_t(d)] += t.dim(d);
  }
  Tensor y = Tensor::empty(s, x0.dtype(), x0.device());
  if (y.numel() == 0) return y;
  int64_t outer = 1, inner = int64_t(dtype_size(x0.dtype()));
  for (int i = 0; i < d; ++i) outer *= s[size_t(i)];
  for (int i = d + 1; i < x0.ndim(); ++i) inner *= s[size_t(i)];
  const int64_t out_row = s[size_t(d)] * inner;
  cudaStream_t st = stream(detail::dev(x0));
  int64_t off = 0;
  for (const Tensor& t : xs) {
    const int64_t row = t.dim(d) * inner;
    if (row > 0)
      ERNIE_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(y.raw()) + off, size_t(out_row), t.raw(), size_t(row),
                                         size_t(row), size_t(outer), cudaMemcpyDeviceToDevice, st));
    off += row;
  }
  return y;
}

Tensor slice(const Tensor& x, int dim, int64_t start, int64_t len) {
  check_cuda(x, "slice", "x");
  const int d = norm_dim(dim, x.ndim(), "slice", x.shape());
  ERNIE_CHECK(start >= 0 && len >= 0 && start + len <= x.dim(d), "slice: [", std::to_string(start), ", ",
              std::to_string(start + len), ") outside dim ", std::to_string(d), " of ", shape_str(x.shape()));
  Shape s = x.shape();
  s[size_t(d)] = len;
  Tensor y = Tensor::empty(s, x.dtype(), x.device());
  if (y.numel() == 0) return y;
  int64_t outer = 1, inner = int64_t(dtype_size(x.dtype()));
  for (int i = 0; i < d; ++i) outer *= s[size_t(i)];
  for (int i = d + 1; i < x.ndim(); ++i) inner *= s[size_t(i)];
  ERNIE_CUDA_CHECK(cudaMemcpy2DAsync(y.raw(), size_t(len * inner), static_cast<const char*>(x.raw()) + start * inner,
                                     size_t(x.dim(d) * inner), size_t(len * inner), size_t(outer),
                                     cudaMemcpyDeviceToDevice, stream(detail::dev(x))));
  return y;
}

Tensor pad2d(const Tensor& x, int left, int right, int top, int bottom) {
  detail::check_act(x, "pad2d", "x");
  ERNIE_CHECK(x.ndim() >= 2, "pad2d: x ", shape_str(x.shape()), " needs at least [H, W]");
  ERNIE_CHECK(left >= 0 && right >= 0 && top >= 0 && bottom >= 0, "pad2d: negative padding");
  const int64_t H = x.dim(-2), W = x.dim(-1);
  Shape s = x.shape();
  s[s.size() - 2] = H + top + bottom;
  s.back() = W + left + right;
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

Tensor upsample_nearest2x(const Tensor& x) {
  detail::check_act(x, "upsample_nearest2x", "x");
  ERNIE_CHECK(x.ndim() >= 2, "upsample_nearest2x: x ", shape_str(x.shape()), " needs at least [H, W]");
  const int64_t H = x.dim(-2), W = x.dim(-1);
  Shape s = x.shape();
  s[s.size() - 2] = 2 * H;
  s.back() = 2 * W;
  Tensor y = Tensor::empty(s, x.dtype(), x.device());
  const int64_t n = y.numel();
  if (n == 0) return y;
  cudaStream_t st = stream(detail::dev(x));
  by_size(x.dtype(), [&](auto e) {
    using E = decltype(e);
    upsample2x_kernel<E><<<detail::blocks_for(n, kThreads), kThreads, 0, st>>>(x.data<E>(), y.data<E>(), n, H, W);
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
  Tensor y = Tensor::empty({n, C}, act, device);
  if (y.numel() == 0) return y;
  Tensor ids_h = Tensor::empty({n}, DType::I64);
  std::copy(ids.begin(), ids.end(), ids_h.data<int64_t>());
  Tensor ids_d = ids_h.to(device);
  cudaStream_t st = stream(device.index);
  const int64_t total = n * C;
  const unsigned g = detail::blocks_for(total, kThreads);
  auto run = [&](auto src) {
    using S = decltype(src);
    if (act == DType::F32)
      gather_rows_kernel<S, float><<<g, kThreads, 0, st>>>(table.data<S>(), ids_d.data<int64_t>(), y.data<float>(), total, C);
    else
      gather_rows_kernel<S, __nv_bfloat16><<<g, kThreads, 0, st>>>(table.data<S>(), ids_d.data<int64_t>(),
                                                                   y.data<__nv_bfloat16>(), total, C);
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
