// conv2d (NCHW, im2col + sgemm in bands of output rows so the column buffer stays small), zero
// padding and nearest-neighbour 2x upsampling.
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
}

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, int stride, int pad) {
  detail::check_act(x, "conv2d", "x");
  detail::check_weight(w, "conv2d", "weight");
  const Shape out = ops::rules::conv2d(x, w, stride, pad);
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

Tensor upsample_nearest2x(const Tensor& x) {
  detail::check_act(x, "upsample_nearest2x", "x");
  const Shape s = ops::rules::upsample_nearest2x(x);
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
