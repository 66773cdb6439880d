// GroupNorm with whole-image statistics for the tiled VAE (pipeline/vae_tiling.cpp).
//
// The tiled VAE runs each step of the VAE (a resnet, a sampler, the output head: Flux2Vae::Step) over all
// tiles before the next step. A step's GroupNorms need the whole image's statistics, which depend on
// everything before them in the step, so a step takes one pass over the tiles per GroupNorm it holds plus
// one: in pass k the first k GroupNorm calls of every tile normalise with the whole-image moments gathered
// by the earlier passes, and call k records the moments (count, sum, sum of squares per batch row and
// group) of the tile's core, then stops the step (throws Stop: the rest is not needed yet). The cores of all
// tiles add up to the whole image, so after the pass call k's moments are the whole image's. The pass in
// which no call stops is the step's output, computed with whole-image statistics throughout.
//
// Whole-image normalisation is ops::group_norm with a re-parametrised affine: the op normalises by the
// tile's own mean and std (m_t, s_t), so weight' = weight * s_t / s_g and bias' = bias + weight * (m_t - m_g) /
// s_g give (x - m_g) / s_g * weight + bias exactly, with the SiLU still fused. The moments come from two
// GEMMs against a ones / core-column mask (fp32 per image row, summed in double on the host).
#pragma once
#include <cstdint>
#include <vector>

#include "models/flux2_vae.h"

namespace ernie {

// Moments of one GroupNorm call per (batch row, group), summed over a region.
struct GroupMoments {
  std::vector<double> count, sum, sumsq;
};

class TiledGroupNorm {
 public:
  struct Stop {};  // thrown by the call being recorded

  // Starts pass `k` of a step: calls before k use the whole-image moments gathered so far, call k records.
  void begin_pass(size_t k);
  // The current tile's core: rows [y0, y1) and columns [x0, x1) of the step's input tile (a GroupNorm input
  // may be that tile at an integer multiple of its resolution).
  void begin_tile(int64_t in_h, int64_t in_w, int64_t y0, int64_t y1, int64_t x0, int64_t x1);
  // Ends the pass: true when call k was recorded (its whole-image moments are now known), false when the
  // step finished without a call k. Throws if some tiles stopped and others did not.
  bool end_pass();
  Flux2Vae::GroupNormFn fn() {
    return [this](const Tensor& x, int groups, const Flux2Vae::Norm& n, float eps, bool silu, ops::Layout lay) {
      return call(x, groups, n, eps, silu, lay);
    };
  }
  size_t known() const { return global_.size(); }  // calls with whole-image moments

 private:
  Tensor call(const Tensor& x, int groups, const Flux2Vae::Norm& n, float eps, bool silu, ops::Layout lay);

  std::vector<GroupMoments> global_;  // whole-image moments of calls 0 .. known()-1
  GroupMoments acc_;                  // call k's moments over the cores seen in this pass
  size_t k_ = 0, calls_ = 0;          // the recorded call; calls so far in the current tile
  int64_t in_h_ = 0, in_w_ = 0, y0_ = 0, y1_ = 0, x0_ = 0, x1_ = 0;
  int64_t tiles_ = 0, stopped_ = 0;    // tiles begun in this pass, and those that stopped at call k
};

}  // namespace ernie
