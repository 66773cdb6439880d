#include "pipeline/vae_tiling.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "ops/ops.h"

namespace ernie {

namespace {

// Tile origins along one axis of length n: tiles of `tile` with `overlap`, the last one flush with the end.
std::vector<int64_t> tile_starts(int64_t n, int64_t tile, int64_t overlap) {
  if (n <= tile) return {0};
  std::vector<int64_t> s;
  const int64_t stride = tile - overlap;
  for (int64_t x = 0;; x += stride) {
    if (x + tile >= n) {
      s.push_back(n - tile);
      break;
    }
    s.push_back(x);
  }
  return s;
}

// Blend weight of position i in a tile of length len whose left/right neighbours overlap by ov_l/ov_r:
// a linear ramp inside each overlap, 1 elsewhere.
float ramp(int64_t i, int64_t len, int64_t ov_l, int64_t ov_r) {
  float w = 1.f;
  if (ov_l > 0 && i < ov_l) w = std::min(w, float(i + 1) / float(ov_l + 1));
  if (ov_r > 0 && i >= len - ov_r) w = std::min(w, float(len - i) / float(ov_r + 1));
  return w;
}

// Runs `fn` over overlapping tiles of x [B, C, H, W] (tile/overlap in x's pixels) and blends the outputs,
// which are `scale` times larger (decode) or smaller (encode, scale < 1 given as num/den).
Tensor tiled(const Tensor& x, int64_t tile, int64_t overlap, int64_t num, int64_t den,
             const std::function<Tensor(const Tensor&)>& fn) {
  ERNIE_CHECK(x.ndim() == 4, "tiled VAE: input ", shape_str(x.shape()), " is not [B, C, H, W]");
  ERNIE_CHECK(tile > 0 && overlap >= 0 && overlap < tile, "tiled VAE: tile ", std::to_string(tile), " with overlap ",
              std::to_string(overlap), " is invalid (need 0 <= overlap < tile)");
  ERNIE_CHECK(tile * num % den == 0 && overlap * num % den == 0, "tiled VAE: tile and overlap must be multiples of ",
              std::to_string(den));
  const int64_t B = x.dim(0), H = x.dim(2), W = x.dim(3);
  const int64_t th = std::min(tile, H), tw = std::min(tile, W);
  auto ys = tile_starts(H, th, overlap), xs = tile_starts(W, tw, overlap);
  Tensor acc, wsum;
  int64_t C = 0, OH = H * num / den, OW = W * num / den;
  for (size_t yi = 0; yi < ys.size(); ++yi)
    for (size_t xi = 0; xi < xs.size(); ++xi) {
      Tensor part = ops::slice(ops::slice(x, 2, ys[yi], th), 3, xs[xi], tw);
      Tensor out = fn(part).to(kCPU).to_f32();
      const int64_t oh = th * num / den, ow = tw * num / den;
      ERNIE_CHECK(out.ndim() == 4 && out.dim(0) == B && out.dim(2) == oh && out.dim(3) == ow,
                  "tiled VAE: a tile gave ", shape_str(out.shape()));
      if (!acc.defined()) {
        C = out.dim(1);
        acc = Tensor::zeros({B, C, OH, OW}, DType::F32);
        wsum = Tensor::zeros({OH, OW}, DType::F32);
      }
      // Overlaps with the neighbours, in output pixels (0 at the image border).
      auto ov = [&](const std::vector<int64_t>& s, size_t i, int64_t len) -> std::pair<int64_t, int64_t> {
        int64_t l = i > 0 ? (s[i - 1] + len - s[i]) : 0, r = i + 1 < s.size() ? (s[i] + len - s[i + 1]) : 0;
        return {l * num / den, r * num / den};
      };
      auto [ovt, ovb] = ov(ys, yi, th);
      auto [ovl, ovr] = ov(xs, xi, tw);
      const int64_t oy = ys[yi] * num / den, ox = xs[xi] * num / den;
      float* a = acc.f32();
      float* ws = wsum.f32();
      const float* o = out.f32();
      for (int64_t r = 0; r < oh; ++r) {
        const float wy = ramp(r, oh, ovt, ovb);
        for (int64_t c = 0; c < ow; ++c) {
          const float w = wy * ramp(c, ow, ovl, ovr);
          ws[(oy + r) * OW + ox + c] += w;
          for (int64_t b = 0; b < B; ++b)
            for (int64_t ch = 0; ch < C; ++ch)
              a[((b * C + ch) * OH + oy + r) * OW + ox + c] += w * o[((b * C + ch) * oh + r) * ow + c];
        }
      }
    }
  float* a = acc.f32();
  const float* ws = wsum.f32();
  for (int64_t i = 0; i < B * C; ++i)
    for (int64_t p = 0; p < OH * OW; ++p) a[i * OH * OW + p] /= ws[p];
  return acc;
}

}  // namespace

Tensor vae_decode_tiled(const Flux2Vae& vae, const Tensor& z, const VaeTiling& t) {
  const int64_t s = vae.config().spatial_scale();
  return tiled(z, t.tile, t.overlap, s, 1, [&](const Tensor& part) { return vae.decode(part); });
}

Tensor vae_encode_mean_tiled(const Flux2Vae& vae, const Tensor& image, const VaeTiling& t) {
  const int64_t s = vae.config().spatial_scale();
  return tiled(image, int64_t(t.tile) * s, int64_t(t.overlap) * s, 1, s,
               [&](const Tensor& part) { return vae.encode(part).first; });
}

size_t vae_decode_bytes(const VaeConfig& c, int64_t h, int64_t w, DType act) {
  // The last up block runs at full resolution with the first block's channels; a resnet there holds its
  // input, two intermediate maps and the output, plus a 3x3 convolution's workspace (im2col: 9x input).
  const int64_t s = c.spatial_scale();
  const size_t px = size_t(h * s) * size_t(w * s);
  const size_t ch = size_t(c.decoder_channels().front());
  return px * ch * dtype_size(act) * (4 + 9);
}

}  // namespace ernie
