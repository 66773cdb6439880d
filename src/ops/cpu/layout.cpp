// Layout ops (permute, concat, slice: byte moves, any dtype), embedding lookup from a table of any
// float dtype, and the backend's thread count.
#include <cblas.h>
#include <omp.h>

#include <array>
#include <cstring>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/cpu_util.h"
#include "ops/shape_rules.h"

namespace ernie::cpu {

namespace {

void check_cpu(const Tensor& x, const char* op, const char* what) {
  ERNIE_CHECK(x.defined(), op, ": ", what, " is undefined");
  ERNIE_CHECK(x.device().is_cpu(), op, ": ", what, " is on ", x.device().str(), ", expected cpu");
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
  const ops::rules::Permute6 p = ops::rules::permute6(x, dims);
  Tensor y = Tensor::empty(p.out_shape, x.dtype());
  if (y.numel() == 0) return y;
  switch (dtype_size(x.dtype())) {
    case 1: permute_copy(x.data<uint8_t>(), y.data<uint8_t>(), p.out, p.stride); break;
    case 2: permute_copy(x.data<uint16_t>(), y.data<uint16_t>(), p.out, p.stride); break;
    case 4: permute_copy(x.data<uint32_t>(), y.data<uint32_t>(), p.out, p.stride); break;
    default: permute_copy(x.data<uint64_t>(), y.data<uint64_t>(), p.out, p.stride); break;
  }
  return y;
}

Tensor concat(const std::vector<Tensor>& xs, int dim) {
  for (const Tensor& t : xs) check_cpu(t, "concat", "input");
  const ops::rules::RowCopy r = ops::rules::concat(xs, dim);
  Tensor y = Tensor::empty(r.out_shape, xs[0].dtype());
  const int64_t out_row = r.out_shape[size_t(r.dim)] * r.inner;
  int64_t off = 0;
  for (const Tensor& t : xs) {
    const int64_t row = t.dim(r.dim) * r.inner;
    const char* src = static_cast<const char*>(t.raw());
    char* dst = static_cast<char*>(y.raw()) + off;
    for (int64_t o = 0; o < r.outer; ++o) std::memcpy(dst + o * out_row, src + o * row, size_t(row));
    off += row;
  }
  return y;
}

Tensor slice(const Tensor& x, int dim, int64_t start, int64_t len) {
  check_cpu(x, "slice", "x");
  const ops::rules::RowCopy r = ops::rules::slice(x, dim, start, len);
  Tensor y = Tensor::empty(r.out_shape, x.dtype());
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(y.raw());
  for (int64_t o = 0; o < r.outer; ++o)
    std::memcpy(dst + o * len * r.inner, src + (o * x.dim(r.dim) + start) * r.inner, size_t(len * r.inner));
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
