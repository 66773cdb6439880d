// conv2d (im2col + sgemm in bands of output rows or pixels so the column buffer stays small; NCHW or
// NHWC), zero padding and nearest-neighbour 2x upsampling (NCHW or NHWC).
#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/cpu_util.h"
#include "ops/shape_rules.h"

namespace ernie::cpu {

namespace {
constexpr int64_t kColumnFloats = int64_t(8) << 20;  // 32 MiB im2col buffer

// NHWC: x [B, H, W, I], w [O, kh, kw, I]. A band of output pixels gathers its patches as rows
// [npix, kh*kw*I] (each tap a contiguous run of I channels), and rows · wᵀ are the output pixels' rows.
Tensor conv2d_nhwc(const Tensor& x, const Tensor& w, const Tensor& bias, int stride, int pad, const Shape& out) {
  const int64_t B = x.dim(0), H = x.dim(1), W = x.dim(2), I = x.dim(3);
  const int64_t O = w.dim(0), kh = w.dim(1), kw = w.dim(2), Ho = out[1], Wo = out[2], hw = Ho * Wo;
  std::vector<float> b = detail::vec_f32(bias, O, "conv2d", "bias");
  Tensor wf = w.to_f32();
  const int64_t K = kh * kw * I;
  Tensor y = Tensor::empty(out, DType::F32);
  if (y.numel() == 0) return y;
  const float* xp = x.f32();
  float* yp = y.f32();
  const int64_t band = std::max<int64_t>(1, std::min<int64_t>(hw, kColumnFloats / std::max<int64_t>(1, K)));
  std::vector<float> cols(static_cast<size_t>(K * band));
  for (int64_t n = 0; n < B; ++n)
    for (int64_t p0 = 0; p0 < hw; p0 += band) {
      const int64_t np = std::min(band, hw - p0);
      float* yrows = yp + (n * hw + p0) * O;
#pragma omp parallel for schedule(static) if (detail::worth_threads(K * np))
      for (int64_t p = 0; p < np; ++p) {
        const int64_t oy = (p0 + p) / Wo, ox = (p0 + p) % Wo;
        for (int64_t dy = 0; dy < kh; ++dy)
          for (int64_t dx = 0; dx < kw; ++dx) {
            const int64_t iy = oy * stride - pad + dy, ix = ox * stride - pad + dx;
            float* dst = cols.data() + p * K + (dy * kw + dx) * I;
            if (iy >= 0 && iy < H && ix >= 0 && ix < W)
              std::memcpy(dst, xp + ((n * H + iy) * W + ix) * I, size_t(I) * 4);
            else
              std::fill(dst, dst + I, 0.f);
          }
        for (int64_t o = 0; o < O; ++o) yrows[p * O + o] = b.empty() ? 0.f : b[size_t(o)];
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(np), int(O), int(K), 1.f, cols.data(), int(K),
                  wf.data<float>(), int(K), 1.f, yrows, int(O));
    }
  return y;
}
}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, int stride, int pad, ops::Layout layout) {
  detail::check_act(x, "conv2d", "x");
  detail::check_weight(w, "conv2d", "weight");
  const Shape out = ops::rules::conv2d(x, w, stride, pad, layout);
  if (layout == ops::Layout::NHWC) return conv2d_nhwc(x, w, bias, stride, pad, out);
  const int64_t B = x.dim(0), I = x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t O = w.dim(0), kh = w.dim(2), kw = w.dim(3), Ho = out[2], Wo = out[3];
  std::vector<float> b = detail::vec_f32(bias, O, "conv2d", "bias");
  Tensor wf = w.to_f32();
  const float* wp = wf.data<float>();
  const int64_t K = I * kh * kw;
  Tensor y = Tensor::empty({B, O, Ho, Wo}, DType::F32);
  const float* xp = x.f32();
  float* yp = y.f32();
  if (y.numel() == 0) return y;
  const int64_t band = std::max<int64_t>(1, std::min<int64_t>(Ho, kColumnFloats / std::max<int64_t>(1, K * Wo)));
  std::vector<float> cols(static_cast<size_t>(K * band * Wo));
  for (int64_t n = 0; n < B; ++n) {
    float* yn = yp + n * O * Ho * Wo;
    for (int64_t o = 0; o < O; ++o) std::fill(yn + o * Ho * Wo, yn + (o + 1) * Ho * Wo, b.empty() ? 0.f : b[o]);
    for (int64_t r0 = 0; r0 < Ho; r0 += band) {
      const int64_t nr = std::min(band, Ho - r0), npix = nr * Wo;
#pragma omp parallel for schedule(static) if (detail::worth_threads(K * npix))
      for (int64_t kk = 0; kk < K; ++kk) {
        const int64_t c = kk / (kh * kw), dy = (kk / kw) % kh, dx = kk % kw;
        const float* xc = xp + (n * I + c) * H * W;
        float* col = cols.data() + kk * npix;
        for (int64_t r = 0; r < nr; ++r) {
          const int64_t iy = (r0 + r) * stride - pad + dy;
          for (int64_t cx = 0; cx < Wo; ++cx) {
            const int64_t ix = cx * stride - pad + dx;
            col[r * Wo + cx] = (iy >= 0 && iy < H && ix >= 0 && ix < W) ? xc[iy * W + ix] : 0.f;
          }
        }
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(O), int(npix), int(K), 1.f, wp, int(K), cols.data(),
                  int(npix), 1.f, yn + r0 * Wo, int(Ho * Wo));
    }
  }
  return y;
}

Tensor pad2d(const Tensor& x, int left, int right, int top, int bottom) {
  detail::check_act(x, "pad2d", "x");
  const Shape s = ops::rules::pad2d(x, left, right, top, bottom);
  const int64_t H = x.dim(-2), W = x.dim(-1), planes = (H * W != 0) ? x.numel() / (H * W) : 0;
  const int64_t Hn = s[s.size() - 2], Wn = s.back();
  Tensor y = Tensor::zeros(s, DType::F32);
  const float* xp = x.f32();
  float* yp = y.f32();
#pragma omp parallel for schedule(static) if (detail::worth_threads(y.numel()))
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t r = 0; r < H; ++r)
      std::memcpy(yp + p * Hn * Wn + (r + top) * Wn + left, xp + p * H * W + r * W, size_t(W) * 4);
  return y;
}

Tensor upsample_nearest2x(const Tensor& x, ops::Layout layout) {
  detail::check_act(x, "upsample_nearest2x", "x");
  const Shape s = ops::rules::upsample_nearest2x(x, layout);
  if (layout == ops::Layout::NHWC) {  // every output pixel is a copy of the C channels of its source pixel
    const int64_t B = x.dim(0), H = x.dim(1), W = x.dim(2), C = x.dim(3);
    Tensor y = Tensor::empty(s, DType::F32);
    const float* xp = x.f32();
    float* yp = y.f32();
#pragma omp parallel for collapse(2) schedule(static) if (detail::worth_threads(y.numel()))
    for (int64_t n = 0; n < B; ++n)
      for (int64_t r = 0; r < 2 * H; ++r)
        for (int64_t c = 0; c < 2 * W; ++c)
          std::memcpy(yp + ((n * 2 * H + r) * 2 * W + c) * C, xp + ((n * H + r / 2) * W + c / 2) * C, size_t(C) * 4);
    return y;
  }
  const int64_t H = x.dim(-2), W = x.dim(-1), planes = (H * W != 0) ? x.numel() / (H * W) : 0;
  Tensor y = Tensor::empty(s, DType::F32);
  const float* xp = x.f32();
  float* yp = y.f32();
#pragma omp parallel for collapse(2) schedule(static) if (detail::worth_threads(y.numel()))
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t r = 0; r < 2 * H; ++r) {
      const float* src = xp + p * H * W + (r / 2) * W;
      float* dst = yp + p * 4 * H * W + r * 2 * W;
      for (int64_t c = 0; c < 2 * W; ++c) dst[c] = src[c / 2];
    }
  return y;
}

}  // namespace ernie::cpu
