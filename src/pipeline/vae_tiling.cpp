#include "pipeline/vae_tiling.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/ops.h"
#include "pipeline/tiled_group_norm.h"

namespace ernie {

namespace {

std::string I(int64_t i) { return std::to_string(i); }

// A tile in latent pixels: its extent [y0, y1) x [x0, x1) (core plus context, clipped to the image) and
// its core [cy0, cy1) x [cx0, cx1), which it alone contributes to the result.
struct Tile {
  int64_t y0, y1, x0, x1, cy0, cy1, cx0, cx1;
};

// Core boundaries along an axis of length n: ceil(n / tile) cores of near-equal size.
std::vector<int64_t> core_cuts(int64_t n, int64_t tile) {
  const int64_t k = (n + tile - 1) / tile;
  std::vector<int64_t> c;
  for (int64_t i = 0; i <= k; ++i) c.push_back(n * i / k);
  return c;
}

std::vector<Tile> plan_tiles(int64_t h, int64_t w, const VaeTiling& t) {
  const std::vector<int64_t> ys = core_cuts(h, t.tile), xs = core_cuts(w, t.tile);
  std::vector<Tile> tiles;
  for (size_t i = 0; i + 1 < ys.size(); ++i)
    for (size_t j = 0; j + 1 < xs.size(); ++j)
      tiles.push_back({std::max<int64_t>(0, ys[i] - t.overlap), std::min<int64_t>(h, ys[i + 1] + t.overlap),
                       std::max<int64_t>(0, xs[j] - t.overlap), std::min<int64_t>(w, xs[j + 1] + t.overlap), ys[i],
                       ys[i + 1], xs[j], xs[j + 1]});
  return tiles;
}

using Part = std::function<Tensor(const Tensor&, const Flux2Vae::GroupNormFn&)>;

// Runs `part` (decode_up or encode_down) over the tiles of x [B, C, h*in_s, w*in_s] with whole-image
// GroupNorm statistics (stat_passes + 1 passes) and assembles the cores of the last pass's outputs
// ([B, C', th*out_s, tw*out_s] per tile) into [B, C', h*out_s, w*out_s], F32 on the host.
Tensor run_tiles(const Tensor& x, int64_t in_s, int64_t out_s, const VaeTiling& t, const Part& part) {
  const int64_t B = x.dim(0), h = x.dim(2) / in_s, w = x.dim(3) / in_s, OH = h * out_s, OW = w * out_s;
  const std::vector<Tile> tiles = plan_tiles(h, w, t);
  TiledGroupNorm::Calls global;
  Tensor out;
  for (int pass = 0; pass <= t.stat_passes; ++pass) {
    const bool last = pass == t.stat_passes;
    TiledGroupNorm gn(pass > 0 ? &global : nullptr, !last);
    for (const Tile& tl : tiles) {
      const int64_t th = tl.y1 - tl.y0, tw = tl.x1 - tl.x0;
      const Tensor in = ops::slice(ops::slice(x, 2, tl.y0 * in_s, th * in_s), 3, tl.x0 * in_s, tw * in_s);
      gn.begin_tile(th, tw, tl.cy0 - tl.y0, tl.cy1 - tl.y0, tl.cx0 - tl.x0, tl.cx1 - tl.x0);
      const Tensor y = part(in, gn.fn());
      gn.end_tile();
      ERNIE_CHECK(y.ndim() == 4 && y.dim(0) == B && y.dim(2) == th * out_s && y.dim(3) == tw * out_s,
                  "tiled VAE: a ", I(th), "x", I(tw), " tile gave ", shape_str(y.shape()));
      if (!last) continue;
      const int64_t C = y.dim(1), ch = (tl.cy1 - tl.cy0) * out_s, cw = (tl.cx1 - tl.cx0) * out_s;
      const Tensor core = ops::slice(ops::slice(y, 2, (tl.cy0 - tl.y0) * out_s, ch), 3, (tl.cx0 - tl.x0) * out_s, cw)
                              .to(kCPU).to_f32();
      if (!out.defined()) out = Tensor::zeros({B, C, OH, OW}, DType::F32);
      ERNIE_CHECK(out.dim(1) == C, "tiled VAE: tiles gave ", I(out.dim(1)), " and ", I(C), " channels");
      const float* src = core.f32();
      float* dst = out.f32();
      for (int64_t bc = 0; bc < B * C; ++bc)
        for (int64_t r = 0; r < ch; ++r)
          std::memcpy(dst + (bc * OH + tl.cy0 * out_s + r) * OW + tl.cx0 * out_s, src + (bc * ch + r) * cw,
                      size_t(cw) * sizeof(float));
    }
    if (!last) global = gn.recorded();
  }
  return out;
}

void check_input(const Tensor& x, const char* what) {
  ERNIE_CHECK(x.defined() && x.ndim() == 4, "tiled VAE ", what, ": input ", x.defined() ? shape_str(x.shape()) : "undefined",
              " is not [B, C, H, W]");
}

}  // namespace

void check_vae_tiling(const VaeTiling& t) {
  ERNIE_CHECK(t.tile >= 1, "tiled VAE: tile ", I(t.tile), " must be at least 1 latent pixel");
  ERNIE_CHECK(t.overlap >= 0 && t.overlap <= t.tile, "tiled VAE: overlap ", I(t.overlap),
              " must be between 0 and the tile size ", I(t.tile));
  ERNIE_CHECK(t.stat_passes >= 1 && t.stat_passes <= 8, "tiled VAE: stat_passes ", I(t.stat_passes),
              " must be between 1 and 8");
}

Tensor vae_decode_tiled(const Flux2Vae& vae, const Tensor& z, const VaeTiling& t) {
  check_vae_tiling(t);
  check_input(z, "decode");
  if (z.dim(2) <= t.tile && z.dim(3) <= t.tile) return vae.decode(z).to(kCPU).to_f32();
  const Tensor h = vae.decode_mid(z);
  return run_tiles(h, 1, vae.config().spatial_scale(), t,
                   [&](const Tensor& part, const Flux2Vae::GroupNormFn& gn) { return vae.decode_up(part, gn); });
}

Tensor vae_encode_mean_tiled(const Flux2Vae& vae, const Tensor& image, const VaeTiling& t) {
  check_vae_tiling(t);
  check_input(image, "encode");
  const int64_t s = vae.config().spatial_scale();
  ERNIE_CHECK(image.dim(2) % s == 0 && image.dim(3) % s == 0, "tiled VAE encode: image height and width must be "
              "multiples of ", I(s), ", got ", shape_str(image.shape()));
  if (image.dim(2) <= t.tile * s && image.dim(3) <= t.tile * s) return vae.encode(image).first.to(kCPU).to_f32();
  const Tensor h = run_tiles(image, s, 1, t, [&](const Tensor& part, const Flux2Vae::GroupNormFn& gn) {
    return vae.encode_down(part, gn);
  });
  return vae.encode_mid(h).first.to(kCPU).to_f32();
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
  // The mid block's output stays resident ([C, h, w]) and the mid block itself runs at latent resolution
  // (a resnet's maps and workspace as above); one tile's up path adds the F32 copy and square its
  // GroupNorm statistics take.
  const size_t mid_ch = size_t(c.decoder_channels().back()), lat = size_t(h) * size_t(w);
  const size_t mid = lat * mid_ch * dtype_size(act) * (1 + 4 + 9);
  const int64_t th = std::min<int64_t>(h, t.tile + 2 * t.overlap), tw = std::min<int64_t>(w, t.tile + 2 * t.overlap);
  const int64_t s = c.spatial_scale();
  const size_t tile_px = size_t(th * s) * size_t(tw * s), ch = size_t(c.decoder_channels().front());
  return std::max(mid, lat * mid_ch * dtype_size(act) + vae_decode_bytes(c, th, tw, act) + tile_px * ch * 8);
}

std::optional<VaeTiling> auto_vae_tiling(const VaeConfig& c, int64_t h, int64_t w, DType act, size_t free_bytes) {
  const double budget = 0.8 * double(free_bytes);  // a margin for the allocator's rounding and cuDNN workspaces
  if (double(vae_decode_bytes(c, h, w, act)) <= budget) return std::nullopt;
  VaeTiling t;
  for (int tile : {256, 192, 128, 96, 64, 48, 32, 16}) {
    t.tile = tile;
    if (double(vae_decode_tiled_bytes(c, h, w, act, t)) <= budget) break;
  }
  return t;
}

}  // namespace ernie
