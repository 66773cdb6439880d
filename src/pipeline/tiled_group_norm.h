// GroupNorm with whole-image statistics for the tiled VAE (pipeline/vae_tiling.cpp).
//
// The tiled part of the VAE (decoder up path, encoder down path) runs once per tile and pass with this
// class's fn() as its GroupNorm. The i-th call within a tile is the same GroupNorm of the model in every
// tile, so calls are counted per tile. For each call it
//   - records, when recording, the moments (count, sum, sum of squares per batch row and group) of the
//     tile's core: the region the tile owns, so the cores of all tiles add up to the whole image;
//   - normalises with the whole-image moments a previous pass recorded for that call when it has them,
//     else with the tile's own (plain ops::group_norm: the first pass).
// Whole-image normalisation is ops::group_norm with a re-parametrised affine: the op normalises by the
// tile's own mean/std (m_t, s_t), so weight' = weight * s_t / s_g and bias' = bias + weight * (m_t - m_g) / s_g
// give (x - m_g) / s_g * weight + bias exactly, with the SiLU still fused. The moments come from GEMMs
// against a ones/core mask (fp32 per image row, summed in double on the host).
#pragma once
#include <cstdint>
#include <vector>

#include "models/flux2_vae.h"

namespace ernie {

// Moments of one GroupNorm call, per (batch row, group), summed over the image (or a region).
struct GroupMoments {
  std::vector<double> count, sum, sumsq;
};

class TiledGroupNorm {
 public:
  using Calls = std::vector<GroupMoments>;  // one per GroupNorm call of a tile, in call order
  // `global`: whole-image moments of a previous pass (nullptr: each tile uses its own statistics);
  // `record`: gather this pass's moments over the tiles' cores.
  TiledGroupNorm(const Calls* global, bool record) : global_(global), record_(record) {}
  // A tile of th x tw latent pixels whose core is rows [cy0, cy1) and columns [cx0, cx1) of it. Every
  // GroupNorm input is this tile at an integer multiple of latent resolution.
  void begin_tile(int64_t th, int64_t tw, int64_t cy0, int64_t cy1, int64_t cx0, int64_t cx1);
  void end_tile();  // checks that every tile made the same number of calls
  Flux2Vae::GroupNormFn fn() {
    return [this](const Tensor& x, int groups, const Flux2Vae::Norm& n, float eps, bool silu) {
      return call(x, groups, n, eps, silu);
    };
  }
  const Calls& recorded() const { return recorded_; }

 private:
  Tensor call(const Tensor& x, int groups, const Flux2Vae::Norm& n, float eps, bool silu);

  const Calls* global_;
  bool record_;
  Calls recorded_;
  int64_t th_ = 0, tw_ = 0, cy0_ = 0, cy1_ = 0, cx0_ = 0, cx1_ = 0;
  size_t calls_ = 0;     // GroupNorm calls in the current tile
  int64_t tiles_ = 0;    // tiles finished in this pass
  size_t per_tile_ = 0;  // calls per tile (from the first tile)
};

}  // namespace ernie
