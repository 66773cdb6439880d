// Tiled VAE decode and encode: peak memory follows the tile size instead of the image size, and the
// result matches the untiled one (>= 40 dB PSNR on the tiny fixture; tests/test_vae_tiling.cpp).
//
// How (decode; encode is the mirror image):
//   - decode_mid (post_quant_conv, conv_in, the mid block with its attention) runs untiled on the whole
//     latent: it is at latent resolution, so small, and its attention stays global.
//   - the up path runs per tile. The latent is cut into a grid of cores (near-equal, at most `tile`
//     latent pixels a side); each tile is its core plus `overlap` latent pixels of context on every side
//     (clipped at the image border), and only its core is kept, so there is no blending and no seam as
//     long as the context covers the convolutions' reach (Flux2: ~12 latent pixels in the up path; the
//     little that reaches further is what the default 8 leaves, well below the 40 dB bar).
//   - every GroupNorm must see the whole image's statistics, which one tile cannot know. Pass 1 runs all
//     tiles with per-tile statistics and records every GroupNorm's moments over the cores; each further
//     pass normalises with the previous pass's whole-image moments and records again
//     (pipeline/tiled_group_norm.h). The first GroupNorm is exact after one pass, the later ones converge
//     as their inputs do; `stat_passes` statistics passes precede the output pass.
// Cost: (stat_passes + 1) runs of the up path, each over (tile + 2 overlap)² / tile² of the pixels, plus
// two small GEMMs per GroupNorm and tile: with the defaults and 64-pixel tiles ~4.7x the untiled up path.
// One tile (latent no larger than `tile`) is the untiled decode, exactly.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>

#include "models/flux2_vae.h"

namespace ernie {

struct VaeTiling {
  int tile = 64;         // largest core side, in latent pixels (image pixels: tile * spatial_scale)
  int overlap = 8;       // latent pixels of context each tile computes beyond its core on every side
  int stat_passes = 2;   // passes that gather GroupNorm statistics before the output pass (1..8)
};
// Throws Error naming the bad field unless 1 <= tile, 0 <= overlap <= tile, 1 <= stat_passes <= 8.
void check_vae_tiling(const VaeTiling& t);

// z [B, L, h, w] -> image [B, 3, h*s, w*s], F32 on the host.
Tensor vae_decode_tiled(const Flux2Vae& vae, const Tensor& z, const VaeTiling& t = {});
// image [B, 3, H, W] -> posterior mean [B, L, H/s, W/s], F32 on the host (tile and overlap in latent pixels).
Tensor vae_encode_mean_tiled(const Flux2Vae& vae, const Tensor& image, const VaeTiling& t = {});

// Bytes the untiled decode of an h×w latent needs at its widest layer (activations only), for deciding
// when to tile.
size_t vae_decode_bytes(const VaeConfig& c, int64_t h, int64_t w, DType act);
// Bytes the tiled decode of an h×w latent needs: the untiled mid block plus one tile's up path.
size_t vae_decode_tiled_bytes(const VaeConfig& c, int64_t h, int64_t w, DType act, const VaeTiling& t);

// The automatic choice for a decode of an h×w latent with `free_bytes` of device memory: nullopt when the
// untiled decode fits (with a margin), else the largest tile (from 256 latent pixels down to 16) whose
// tiled decode fits, or the smallest when none does.
std::optional<VaeTiling> auto_vae_tiling(const VaeConfig& c, int64_t h, int64_t w, DType act, size_t free_bytes);

}  // namespace ernie
