// Layout ops (permute, concat, slice: byte moves, any dtype), embedding lookup from a table of any
// float dtype, and the backend's thread count.
#include <cblas.h>
#include <omp.h>

#include <array>
#include <cstring>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/cpu_util.h"

namespace ernie::cpu {

namespace {

void check_cpu(const Tensor& x, const char* op, const char* what) {
  ERNIE_CHECK(x.defined(), op, ": ", what, " is undefined");
  ERNIE_CHECK(x.device().is_cpu(), op, ": ", what, " is on ", x.device().str(), ", expected cpu");
}

int norm_dim(int dim, int ndim, const char* op, const Shape& s) {
  ERNIE_CHECK(dim >= -ndim && dim < ndim, op, ": dim ", std::to_string(dim), " out of range for ", shape_str(s));
  return dim < 0 ? dim + ndim : dim;
}

template <class T>
void permute_copy(const T* in, T* out, const std::array<int64_t, 6>& os, const std::array<int64_t, 6>& st) {
#pragma omp parallel for collapse(4) schedule(static) if (detail::worth_threads(os[0] * os[1] * os[2] * os[3] * os[4] * os[5]))
  for (int64_t a = 0; a < os[0]; ++a)
    for (int64_t b = 0; b < os[1]; ++b)
      for (int64_t c = 0; c < os[2]; ++c)
        for (int64_t d = 0; d < os[3]; ++d) {
          int64_t o = (((a * os[1] + b) * os[2] + c) * os[3] + d) * os[4] * os[5];
          const T* src = in + a * st[0] + b * st[1] + c * st[2] + d * st[3];
          for (int64_t e = 0; e < os[4]; ++e)
            for (int64_t f = 0; f < os[5]; ++f) out[o++] = src[e * st[4] + f * st[5]];
        }
}

}  // namespace

Tensor permute(const Tensor& x, const std::vector<int>& dims) {
  check_cpu(x, "permute", "x");
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
  std::array<int64_t, 6> os{1, 1, 1, 1, 1, 1}, st{0, 0, 0, 0, 0, 0};
  Shape out_shape(static_cast<size_t>(nd));
  for (int i = 0; i < nd; ++i) {
    const size_t k = size_t(6 - nd + i);
    out_shape[size_t(i)] = x.dim(dims[size_t(i)]);
    os[k] = out_shape[size_t(i)];
    st[k] = in_stride[size_t(dims[size_t(i)])];
  }
  Tensor y = Tensor::empty(out_shape, x.dtype());
  if (y.numel() == 0) return y;
  switch (dtype_size(x.dtype())) {
    case 1: permute_copy(x.data<uint8_t>(), y.data<uint8_t>(), os, st); break;
    case 2: permute_copy(x.data<uint16_t>(), y.data<uint16_t>(), os, st); break;
    case 4: permute_copy(x.data<uint32_t>(), y.data<uint32_t>(), os, st); break;
    default: permute_copy(x.data<uint64_t>(), y.data<uint64_t>(), os, st); break;
  }
  return y;
}

Tensor concat(const std::vector<Tensor>& xs, int dim) {
  ERNIE_CHECK(!xs.empty(), "concat: no tensors");
  for (const Tensor& t : xs) check_cpu(t, "concat", "input");
  const Tensor& x0 = xs[0];
  const int d = norm_dim(dim, x0.ndim(), "concat", x0.shape());
  Shape s = x0.shape();
  s[size_t(d)] = 0;
  for (const Tensor& t : xs) {
    bool ok = t.ndim() == x0.ndim() && t.dtype() == x0.dtype();
    for (int i = 0; ok && i < x0.ndim(); ++i) ok = i == d || t.dim(i) == x0.dim(i);
    ERNIE_CHECK(ok, "concat: ", shape_str(t.shape()), " ", dtype_name(t.dtype()), " does not match ",
                shape_str(x0.shape()), " ", dtype_name(x0.dtype()), " outside dim ", std::to_string(d));
    s[size_t(d)] += t.dim(d);
  }
  Tensor y = Tensor::empty(s, x0.dtype());
  int64_t outer = 1, inner = int64_t(dtype_size(x0.dtype()));
  for (int i = 0; i < d; ++i) outer *= s[size_t(i)];
  for (int i = d + 1; i < x0.ndim(); ++i) inner *= s[size_t(i)];
  const int64_t out_row = s[size_t(d)] * inner;
  int64_t off = 0;
  for (const Tensor& t : xs) {
    const int64_t row = t.dim(d) * inner;
    const char* src = static_cast<const char*>(t.raw());
    char* dst = static_cast<char*>(y.raw()) + off;
    for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + o * out_row, src + o * row, size_t(row));
    off += row;
  }
  return y;
}

Tensor slice(const Tensor& x, int dim, int64_t start, int64_t len) {
  check_cpu(x, "slice", "x");
  const int d = norm_dim(dim, x.ndim(), "slice", x.shape());
  ERNIE_CHECK(start >= 0 && len >= 0 && start + len <= x.dim(d), "slice: [", std::to_string(start), ", ",
              std::to_string(start + len), ") outside dim ", std::to_string(d), " of ", shape_str(x.shape()));
  Shape s = x.shape();
  s[size_t(d)] = len;
  Tensor y = Tensor::empty(s, x.dtype());
  int64_t outer = 1, inner = int64_t(dtype_size(x.dtype()));
  for (int i = 0; i < d; ++i) outer *= s[size_t(i)];
  for (int i = d + 1; i < x.ndim(); ++i) inner *= s[size_t(i)];
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(y.raw());
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + o * len * inner, src + (o * x.dim(d) + start) * inner, size_t(len * inner));
  return y;
}

Tensor embedding(const Tensor& table, const std::vector<int64_t>& ids) {
  detail::check_weight(table, "embedding", "table");
  ERNIE_CHECK(table.ndim() == 2, "embedding: table ", shape_str(table.shape()), " must be [vocab, C]");
  const int64_t V = table.dim(0), C = table.dim(1);
  for (int64_t id : ids)
    ERNIE_CHECK(id >= 0 && id < V, "embedding: token id ", std::to_string(id), " outside the vocabulary [0, ",
                std::to_string(V), ")");
  Tensor y = Tensor::empty({int64_t(ids.size()), C}, DType::F32);
  const char* tp = static_cast<const char*>(table.raw());
  const size_t row = size_t(C) * dtype_size(table.dtype());
  for (size_t i = 0; i < ids.size(); ++i)
    convert_to_f32(table.dtype(), tp + size_t(ids[i]) * row, y.f32() + int64_t(i) * C, size_t(C));
  return y;
}

void set_threads(int n) {
  ERNIE_CHECK(n >= 0, "set_threads: negative thread count ", std::to_string(n));
  if (n == 0) n = omp_get_num_procs();
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

}  // namespace ernie::cpu
