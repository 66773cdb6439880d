#include "models/vae_tiling.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/ops.h"
#include "models/tiled_group_norm.h"

namespace ernie {

namespace {

std::string I(int64_t i) { return std::to_string(i); }

// Core boundaries along an axis of n latent pixels: ceil(n / tile) cores of near-equal size.
std::vector<int64_t> core_cuts(int64_t n, int64_t tile) {
  const int64_t k = (n + tile - 1) / tile;
  std::vector<int64_t> c;
  for (int64_t i = 0; i <= k; ++i) c.push_back(n * i / k);
  return c;
}

// An image tensor as [outer, H, W, inner]: NCHW [B·C, H, W, 1], NHWC [B, H, W, C]. hd and wd are the
// dims of H and W.
struct Grid {
  int64_t outer, H, W, inner;
  int hd, wd;
};
Grid grid_of(const Tensor& x, ops::Layout lay) {
  if (lay == ops::Layout::NHWC) return {x.dim(0), x.dim(1), x.dim(2), x.dim(3), 1, 2};
  return {x.dim(0) * x.dim(1), x.dim(2), x.dim(3), 1, 2, 3};
}
// The shape of x with H and W replaced.
Shape with_hw(const Tensor& x, ops::Layout lay, int64_t H, int64_t W) {
  Shape s = x.shape();
  const Grid g = grid_of(x, lay);
  s[size_t(g.hd)] = H, s[size_t(g.wd)] = W;
  return s;
}

// Rows [y0, y1) and columns [x0, x1) of the host tensor x (any dtype), as a new host tensor.
Tensor host_rect(const Tensor& x, ops::Layout lay, int64_t y0, int64_t y1, int64_t x0, int64_t x1) {
  const Grid g = grid_of(x, lay);
  const int64_t h = y1 - y0, w = x1 - x0;
  const size_t e = dtype_size(x.dtype()) * size_t(g.inner);
  Tensor r = Tensor::empty(with_hw(x, lay, h, w), x.dtype());
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(r.raw());
#pragma omp parallel for collapse(2) schedule(static) if (r.nbytes() > (size_t(1) << 22))
  for (int64_t i = 0; i < g.outer; ++i)
    for (int64_t y = 0; y < h; ++y)
      std::memcpy(dst + size_t((i * h + y) * w) * e, src + size_t((i * g.H + y0 + y) * g.W + x0) * e, size_t(w) * e);
  return r;
}

// Copies the host tensor src into the host tensor dst (same dtype, layout and channels) at (y0, x0).
void paste(const Tensor& dst, const Tensor& src, ops::Layout lay, int64_t y0, int64_t x0) {
  const Grid gs = grid_of(src, lay), gd = grid_of(dst, lay);
  const int64_t h = gs.H, w = gs.W, H = gd.H, W = gd.W;
  const size_t e = dtype_size(src.dtype()) * size_t(gs.inner);
  const char* s = static_cast<const char*>(src.raw());
  char* d = static_cast<char*>(dst.raw());
#pragma omp parallel for collapse(2) schedule(static) if (src.nbytes() > (size_t(1) << 22))
  for (int64_t i = 0; i < gs.outer; ++i)
    for (int64_t y = 0; y < h; ++y)
      std::memcpy(d + size_t((i * H + y0 + y) * W + x0) * e, s + size_t((i * h + y) * w) * e, size_t(w) * e);
}

// Runs `steps` over the tiles of x ([B, C, h*r, w*r] for an h×w latent grid cut at ys × xs, or its NHWC
// form, as `lay` says) in lockstep:
// every step over all tiles (one pass per GroupNorm it holds, plus one; tiled_group_norm.h) before the
// next. A tile is its core plus `halo` pixels of the step's input on every side, which covers the step's
// convolutions, so the cores come out as the untiled step would give them. Each step's output cores are
// assembled (in `lay`, in the VAE's activation dtype) on the host, or with `on_device` on the VAE's device
// (ops::concat, no host round trips).
Tensor run_tiled(const Flux2Vae& vae, Tensor x, ops::Layout lay, const std::vector<Flux2Vae::Step>& steps,
                 const std::vector<int64_t>& ys, const std::vector<int64_t>& xs, int64_t halo, bool on_device) {
  const int64_t h = ys.back(), w = xs.back();
  const Grid g = grid_of(x, lay);
  const int hd = g.hd, wd = g.wd;
  x = x.to(on_device ? vae.device() : kCPU);
  for (size_t si = 0; si < steps.size(); ++si) {
    const int64_t H = x.dim(hd), W = x.dim(wd), r = H / h;
    ERNIE_CHECK(H % h == 0 && W == w * r, "tiled VAE: step ", I(int64_t(si)), " input ", shape_str(x.shape()),
                " is not the ", I(h), "x", I(w), " latent grid at an integer resolution");
    TiledGroupNorm gn;
    Tensor y;
    std::vector<std::vector<Tensor>> cores(ys.size() - 1);  // on_device: the output cores of the last pass
    for (size_t pass = 0;; ++pass) {
      gn.begin_pass(pass);
      for (size_t i = 0; i + 1 < ys.size(); ++i)
        for (size_t j = 0; j + 1 < xs.size(); ++j) {
          const int64_t cy0 = ys[i] * r, cy1 = ys[i + 1] * r, cx0 = xs[j] * r, cx1 = xs[j + 1] * r;
          const int64_t ey0 = std::max<int64_t>(0, cy0 - halo), ey1 = std::min(H, cy1 + halo);
          const int64_t ex0 = std::max<int64_t>(0, cx0 - halo), ex1 = std::min(W, cx1 + halo);
          Tensor in = on_device ? ops::slice(ops::slice(x, hd, ey0, ey1 - ey0), wd, ex0, ex1 - ex0)
                                : host_rect(x, lay, ey0, ey1, ex0, ex1).to(vae.device());
          if (in.dtype() != vae.act_dtype()) in = ops::cast(in, vae.act_dtype());
          gn.begin_tile(ey1 - ey0, ex1 - ex0, cy0 - ey0, cy1 - ey0, cx0 - ex0, cx1 - ex0);
          Tensor out;
          try {
            out = steps[si](in, gn.fn());
          } catch (const TiledGroupNorm::Stop&) {
            continue;  // this pass only gathered a GroupNorm's moments
          }
          // Output pixels per input pixel: oh / ih (2 upsampler, 1/2 downsampler, 1 otherwise).
          ERNIE_CHECK(out.ndim() == 4, "tiled VAE: step ", I(int64_t(si)), " gave ", shape_str(out.shape()));
          const int64_t ih = ey1 - ey0, iw = ex1 - ex0, oh = out.dim(hd), ow = out.dim(wd);
          auto at = [](int64_t p, int64_t num, int64_t den) {
            ERNIE_CHECK(p * num % den == 0, "tiled VAE: a tile edge falls between output pixels (", I(p), " * ",
                        I(num), " / ", I(den), "); use an even halo");
            return p * num / den;
          };
          ERNIE_CHECK(out.ndim() == 4 && out.dim(0) == x.dim(0) && oh * iw == ow * ih, "tiled VAE: step ",
                      I(int64_t(si)), " turned a ", I(ih), "x", I(iw), " tile into ", shape_str(out.shape()));
          const int64_t oy = at(cy0 - ey0, oh, ih), ox = at(cx0 - ex0, ow, iw);
          const int64_t ch = at(cy1 - cy0, oh, ih), cw = at(cx1 - cx0, ow, iw);
          const Tensor core = ops::slice(ops::slice(out, hd, oy, ch), wd, ox, cw);
          if (on_device) {
            cores[i].push_back(core);
            continue;
          }
          if (!y.defined()) y = Tensor::empty(with_hw(out, lay, at(H, oh, ih), at(W, ow, iw)), out.dtype());
          paste(y, core.to(kCPU), lay, at(cy0, oh, ih), at(cx0, ow, iw));
        }
      if (!gn.end_pass()) break;
    }
    if (on_device) {  // rows of cores side by side, then the rows stacked; each row's cores freed as it goes
      std::vector<Tensor> rows;
      for (std::vector<Tensor>& row : cores) {
        rows.push_back(row.size() == 1 ? row[0] : ops::concat(row, wd));
        row.clear();
      }
      y = rows.size() == 1 ? rows[0] : ops::concat(rows, hd);
    }
    x = y;
  }
  return x;
}

}  // namespace

void check_vae_tiling(const VaeTiling& t) {
  ERNIE_CHECK(t.tile >= 1, "tiled VAE: tile ", I(t.tile), " must be at least 1 latent pixel");
  ERNIE_CHECK(t.halo >= 0 && t.halo <= 16 && t.halo % 2 == 0, "tiled VAE: halo ", I(t.halo),
              " must be an even number of pixels from 0 to 16");
}

Tensor vae_decode_tiled(const Flux2Vae& vae, const Tensor& z, const VaeTiling& t) {
  check_vae_tiling(t);
  ERNIE_CHECK(z.defined() && z.ndim() == 4, "tiled VAE decode: input ", z.defined() ? shape_str(z.shape()) : "undefined",
              " is not [B, C, h, w]");
  if (z.dim(2) <= t.tile && z.dim(3) <= t.tile) return vae.decode(z).to(kCPU).to_f32();
  const Tensor h = vae.decode_mid(z);
  const Tensor y = run_tiled(vae, h, vae.decode_layout(), vae.decode_up_steps(), core_cuts(z.dim(2), t.tile),
                             core_cuts(z.dim(3), t.tile), t.halo, t.on_device);
  return vae.decode_image(y).to(kCPU).to_f32();
}

Tensor vae_encode_mean_tiled(const Flux2Vae& vae, const Tensor& image, const VaeTiling& t) {
  check_vae_tiling(t);
  ERNIE_CHECK(image.defined() && image.ndim() == 4, "tiled VAE encode: input ",
              image.defined() ? shape_str(image.shape()) : "undefined", " is not [B, 3, H, W]");
  const int64_t s = vae.config().spatial_scale();
  ERNIE_CHECK(image.dim(2) % s == 0 && image.dim(3) % s == 0, "tiled VAE encode: image height and width must be "
              "multiples of ", I(s), ", got ", shape_str(image.shape()));
  const int64_t h = image.dim(2) / s, w = image.dim(3) / s;
  if (h <= t.tile && w <= t.tile) return vae.encode(image).first.to(kCPU).to_f32();
  const Tensor x = run_tiled(vae, image, ops::Layout::NCHW, vae.encode_down_steps(), core_cuts(h, t.tile),
                             core_cuts(w, t.tile), t.halo, t.on_device);
  return vae.encode_mid(x).first.to(kCPU).to_f32();
}

size_t vae_decode_bytes(const VaeConfig& c, int64_t h, int64_t w, DType act) {
  // The last up block runs at full resolution with the first block's channels; a resnet there holds its
  // input, two intermediate maps and the output, plus a 3x3 convolution's workspace (im2col: 9x input).
  const int64_t s = c.spatial_scale();
  const size_t px = size_t(h * s) * size_t(w * s);
  const size_t ch = size_t(c.decoder_channels().front());
  return px * ch * dtype_size(act) * (4 + 9);
}

size_t vae_decode_tiled_bytes(const VaeConfig& c, int64_t h, int64_t w, DType act, const VaeTiling& t) {
  // The mid block runs untiled at latent resolution (a resnet's maps and workspace, as above); then one
  // tile of one step at a time, the widest at full resolution, plus the F32 copy and square of a
  // GroupNorm input that its statistics take. Step inputs and outputs wait on the host.
  const size_t mid = size_t(h) * size_t(w) * size_t(c.decoder_channels().back()) * dtype_size(act) * (4 + 9);
  const int64_t th = std::min<int64_t>(h, t.tile + 1), tw = std::min<int64_t>(w, t.tile + 1);  // + the halo
  const int64_t s = c.spatial_scale();
  const size_t tile_px = size_t(th * s) * size_t(tw * s), ch = size_t(c.decoder_channels().front());
  return std::max(mid, vae_decode_bytes(c, th, tw, act) + tile_px * ch * 8);
}

size_t vae_decode_resident_bytes(const VaeConfig& c, int64_t h, int64_t w, DType act) {
  // At the widest steps (full resolution) the step's input, its output cores and their concatenation
  // (a row at a time): ~3 full-resolution activations, 4 for a margin.
  const int64_t s = c.spatial_scale();
  return size_t(h * s) * size_t(w * s) * size_t(c.decoder_channels().front()) * dtype_size(act) * 4;
}

std::optional<VaeTiling> auto_vae_tiling(const VaeConfig& c, int64_t h, int64_t w, DType act, size_t free_bytes,
                                         bool force) {
  const double budget = 0.8 * double(free_bytes);  // a margin for the allocator's rounding and cuDNN workspaces
  if (!force && double(vae_decode_bytes(c, h, w, act)) <= budget) return std::nullopt;
  VaeTiling t;
  const bool default_fits = double(vae_decode_tiled_bytes(c, h, w, act, t)) <= budget;
  if (!force || !default_fits)
    for (int tile : {256, 192, 128, 96, 64, 48, 32, 16}) {
      t.tile = tile;
      if (double(vae_decode_tiled_bytes(c, h, w, act, t)) <= budget) break;
    }
  t.on_device = double(vae_decode_tiled_bytes(c, h, w, act, t) + vae_decode_resident_bytes(c, h, w, act)) <= budget;
  return t;
}

}  // namespace ernie
