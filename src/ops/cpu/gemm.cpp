// linear: y = x · wᵀ + bias with OpenBLAS sgemm. F32 weights are used in place; other weights (BF16, F16,
// and the 8-bit codes of quantized ones) are converted to f32 in blocks of output rows into a scratch
// buffer, so a large checkpoint is never expanded as a whole; for a few x rows (token-by-token decoding)
// each weight row is converted and dotted directly instead. Quantized weights then scale the product:
// y = (x' · qᵀ) · sx[row] · scale[out] (+ bias), x' = x (I8) or x quantized per row to fp8 (F8_E4M3;
// linear_fp8 is handed x already quantized).
#include <cblas.h>

#include <algorithm>
#include <vector>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/cpu_util.h"
#include "ops/shape_rules.h"

namespace ernie::cpu {

namespace {
constexpr size_t kScratchFloats = size_t(4) << 20;  // 16 MiB of converted weight rows per block
constexpr int64_t kGemvRows = 4;                     // up to this many x rows: convert-and-dot per weight row

void convert_row(DType t, const void* in, float* out, size_t n) {
  if (t == DType::I8 || t == DType::F8_E4M3) convert_quantized(t, in, out, n);
  else convert_to_f32(t, in, out, n);
}

// y[m, out] (+)= x[m, in] · w[out, in]ᵀ, w in any storage dtype read as its stored values; y already holds
// the bias when `accumulate`.
void gemm_rows(const float* xp, int64_t m, const Tensor& w, float* yp, bool accumulate) {
  const int64_t in = w.dim(1), out = w.dim(0);
  const float beta = accumulate ? 1.f : 0.f;
  if (w.dtype() == DType::F32) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(out), int(in), 1.f, xp, int(in),
                w.data<float>(), int(in), beta, yp, int(out));
    return;
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
        convert_row(w.dtype(), wp + size_t(o * in) * esz, row.data(), size_t(in));
        for (int64_t i = 0; i < m; ++i) {
          const float* xi = xp + i * in;
          float s = 0.f;
#pragma omp simd reduction(+ : s)
          for (int64_t k = 0; k < in; ++k) s += xi[k] * row[size_t(k)];
          yp[i * out + o] = beta * yp[i * out + o] + s;
        }
      }
    }
    return;
  }
  const int64_t rows = std::max<int64_t>(1, std::min<int64_t>(out, int64_t(kScratchFloats) / in));
  std::vector<float> scratch(static_cast<size_t>(rows * in));
  for (int64_t o0 = 0; o0 < out; o0 += rows) {
    const int64_t nb = std::min(rows, out - o0);
#pragma omp parallel for schedule(static) if (detail::worth_threads(nb * in))
    for (int64_t r = 0; r < nb; ++r)
      convert_row(w.dtype(), wp + size_t((o0 + r) * in) * esz, scratch.data() + r * in, size_t(in));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(nb), int(in), 1.f, xp, int(in), scratch.data(),
                int(in), beta, yp + o0, int(out));
  }
}

// The checks and the output of both linears: y [..., out] F32, and whether there is anything to multiply.
Tensor output(const Tensor& x, const Tensor& w, int64_t& m) {
  ERNIE_CHECK(w.ndim() == 2, "linear: weight ", shape_str(w.shape()), " must be 2-D [out, in]");
  ERNIE_CHECK(x.ndim() >= 1 && x.dim(-1) == w.dim(1), "linear: x ", shape_str(x.shape()),
              " last dim does not match weight ", shape_str(w.shape()), " [out, in]");
  m = 1;  // the rows of x (also when in = 0: y is the bias)
  for (int i = 0; i + 1 < x.ndim(); ++i) m *= x.dim(i);
  Shape ys = x.shape();
  ys.back() = w.dim(0);
  return Tensor::zeros(ys, DType::F32);
}
}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  detail::check_act(x, "linear", "x");
  detail::check_weight(w, "linear", "weight");
  int64_t m = 0;
  Tensor y = output(x, w, m);
  const int64_t in = w.dim(1), out = w.dim(0);
  std::vector<float> b = detail::vec_f32(bias, out, "linear", "bias");
  float* yp = y.f32();
  for (int64_t i = 0; !b.empty() && i < m; ++i) std::copy(b.begin(), b.end(), yp + i * out);
  if (m > 0 && out > 0 && in > 0) gemm_rows(x.f32(), m, w, yp, !b.empty());
  return y;
}

namespace {
// y[m, out] = (x' · qᵀ) · sx[row] · scale[out] (+ b[out]) into y (zeros), x' [m, in] F32 (the activations, or
// their fp8 codes as float), sx null: 1.
void scaled_gemm(const float* xp, const float* sx, int64_t m, const Tensor& q, const Tensor& scale,
                 const std::vector<float>& b, float* yp) {
  const int64_t in = q.dim(1), out = q.dim(0);
  if (in > 0) gemm_rows(xp, m, q, yp, false);
  const float* sw = scale.f32();
#pragma omp parallel for schedule(static) if (detail::worth_threads(m * out))
  for (int64_t i = 0; i < m; ++i)
    for (int64_t o = 0; o < out; ++o)
      yp[i * out + o] = yp[i * out + o] * ((sx ? sx[i] : 1.f) * sw[o]) + (b.empty() ? 0.f : b[size_t(o)]);
}
}  // namespace

Tensor linear_q(const Tensor& x, const Tensor& q, const Tensor& scale, const Tensor& bias) {
  detail::check_act(x, "linear", "x");
  ops::rules::quantized_weight(q, scale, "linear");
  ERNIE_CHECK(q.device().is_cpu(), "linear: weight is on ", q.device().str(), ", expected cpu");
  int64_t m = 0;
  Tensor y = output(x, q, m);
  const int64_t in = q.dim(1), out = q.dim(0);
  if (q.dtype() == DType::F8_E4M3 && in > 0 && m > 0 && out > 0)  // W8A8: the activations quantized per row
  {
    const ops::Weight a = quantize(x.reshape({m, in}), DType::F8_E4M3);
    return linear_fp8(a.w, a.scale, q, scale, bias, DType::F32).reshape(y.shape());
  }
  std::vector<float> b = detail::vec_f32(bias, out, "linear", "bias");
  if (m == 0 || out == 0) return y;
  scaled_gemm(x.f32(), nullptr, m, q, scale, b, y.f32());
  return y;
}

Tensor linear_fp8(const Tensor& x, const Tensor& sx, const Tensor& q, const Tensor& scale, const Tensor& bias,
                  DType out_dtype) {
  ops::rules::fp8_linear_operands(x, sx, q, scale);
  ERNIE_CHECK(x.device().is_cpu() && q.device().is_cpu(), "linear: x is on ", x.device().str(), " and weight on ",
              q.device().str(), ", expected cpu");
  ERNIE_CHECK(out_dtype == DType::F32, "linear: the CPU backend computes in F32, not ", dtype_name(out_dtype));
  int64_t m = 0;
  Tensor y = output(x, q, m);
  std::vector<float> b = detail::vec_f32(bias, q.dim(0), "linear", "bias");
  if (y.numel() == 0) return y;
  scaled_gemm(dequantize(x, Tensor()).f32(), sx.f32(), m, q, scale, b, y.f32());
  return y;
}

}  // namespace ernie::cpu
