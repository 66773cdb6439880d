// linear: y = x · wᵀ + bias with OpenBLAS sgemm. F32 weights are used in place; BF16/F16 weights are
// converted to f32 in blocks of output rows into a scratch buffer, so a large checkpoint is never
// expanded as a whole; for a few x rows (token-by-token decoding) each weight row is converted and
// dotted directly instead.
#include <cblas.h>

#include <algorithm>
#include <vector>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/cpu_util.h"

namespace ernie::cpu {

namespace {
constexpr size_t kScratchFloats = size_t(4) << 20;  // 16 MiB of converted weight rows per block
constexpr int64_t kGemvRows = 4;                     // up to this many x rows: convert-and-dot per weight row
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  detail::check_act(x, "linear", "x");
  detail::check_weight(w, "linear", "weight");
  ERNIE_CHECK(w.ndim() == 2, "linear: weight ", shape_str(w.shape()), " must be 2-D [out, in]");
  ERNIE_CHECK(x.ndim() >= 1 && x.dim(-1) == w.dim(1), "linear: x ", shape_str(x.shape()), " last dim does not match weight ",
              shape_str(w.shape()), " [out, in]");
  const int64_t in = w.dim(1), out = w.dim(0), m = in ? x.numel() / in : 0;
  std::vector<float> b = detail::vec_f32(bias, out, "linear", "bias");
  Shape ys = x.shape();
  ys.back() = out;
  Tensor y = Tensor::empty(ys, DType::F32);
  float* yp = y.f32();
  if (m == 0 || out == 0) return y;
  if (in == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t o = 0; o < out; ++o) yp[i * out + o] = b.empty() ? 0.f : b[o];
    return y;
  }
  const float* xp = x.f32();
  float beta = 0.f;
  if (!b.empty()) {
    for (int64_t i = 0; i < m; ++i) std::copy(b.begin(), b.end(), yp + i * out);
    beta = 1.f;
  }
  if (w.dtype() == DType::F32) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(out), int(in), 1.f, xp, int(in),
                w.data<float>(), int(in), beta, yp, int(out));
    return y;
  }
  const size_t esz = dtype_size(w.dtype());
  const char* wp = static_cast<const char*>(w.raw());
  if (m <= kGemvRows) {
    // Few rows (decoding): one pass over the weight, each row converted into a small buffer and dotted
    // with every x row, so memory traffic is the stored weight alone.
#pragma omp parallel if (detail::worth_threads(out * in))
    {
      std::vector<float> row(static_cast<size_t>(in));
#pragma omp for schedule(static)
      for (int64_t o = 0; o < out; ++o) {
        convert_to_f32(w.dtype(), wp + size_t(o * in) * esz, row.data(), size_t(in));
        for (int64_t i = 0; i < m; ++i) {
          const float* xi = xp + i * in;
          float s = 0.f;
#pragma omp simd reduction(+ : s)
          for (int64_t k = 0; k < in; ++k) s += xi[k] * row[size_t(k)];
          yp[i * out + o] = (b.empty() ? 0.f : b[size_t(o)]) + s;
        }
      }
    }
    return y;
  }
  const int64_t rows = std::max<int64_t>(1, std::min<int64_t>(out, int64_t(kScratchFloats) / in));
  std::vector<float> scratch(static_cast<size_t>(rows * in));
  for (int64_t o0 = 0; o0 < out; o0 += rows) {
    const int64_t nb = std::min(rows, out - o0);
#pragma omp parallel for schedule(static) if (detail::worth_threads(nb * in))
    for (int64_t r = 0; r < nb; ++r)
      convert_to_f32(w.dtype(), wp + size_t((o0 + r) * in) * esz, scratch.data() + r * in, size_t(in));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(nb), int(in), 1.f, xp, int(in), scratch.data(),
                int(in), beta, yp + o0, int(out));
  }
  return y;
}

}  // namespace ernie::cpu
