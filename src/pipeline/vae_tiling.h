// Tiled VAE decode and encode: the latent (or image) is cut into overlapping tiles, each tile runs
// through the VAE alone, and the overlaps are blended with linear ramps, so peak memory follows the tile
// size instead of the image size. Tiles see only their own neighbourhood (GroupNorm statistics and the
// mid-block attention are per tile), so the result differs slightly from the untiled one; the overlap
// hides the seams.
#pragma once
#include "models/flux2_vae.h"

namespace ernie {

struct VaeTiling {
  int tile = 64;     // tile side in latent pixels (decode) — image pixels are tile * spatial_scale
  int overlap = 16;  // overlap between neighbouring tiles, in latent pixels
};

// z [B, L, h, w] -> image [B, 3, h*s, w*s], F32 on the host.
Tensor vae_decode_tiled(const Flux2Vae& vae, const Tensor& z, const VaeTiling& t = {});
// image [B, 3, H, W] -> posterior mean [B, L, H/s, W/s] (tiles and overlap given in latent pixels).
Tensor vae_encode_mean_tiled(const Flux2Vae& vae, const Tensor& image, const VaeTiling& t = {});

// Bytes the untiled decode of an h×w latent needs at its widest layer (activations only), for deciding
// when to tile.
size_t vae_decode_bytes(const VaeConfig& c, int64_t h, int64_t w, DType act);

}  // namespace ernie
