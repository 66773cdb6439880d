// Tiled VAE decode and encode: device memory follows the tile size instead of the image size, and the
// result is the untiled one up to float rounding (tests/test_vae_tiling.cpp: >= 40 dB PSNR required,
// far more measured).
//
// How (decode; encode is the mirror image):
//   - decode_mid (post_quant_conv, conv_in, the mid block with its attention) runs untiled on the whole
//     latent: it is at latent resolution, so small, and its attention stays global.
//   - the up path runs as its steps (Flux2Vae::decode_up_steps: each resnet, each upsampler, the output
//     head) in lockstep: one step over all tiles, then the next. The latent is cut into a grid of cores
//     (near-equal, at most `tile` latent pixels a side); at every step a tile is its core plus `halo`
//     pixels of the step's input (2 covers a resnet's two 3x3 convolutions), and only its core is kept,
//     so nothing needs blending and there is no seam. Step inputs and outputs wait on the host (two
//     whole-image activations at the widest step: ~2 GiB in bf16 for a 2048² image), or with on_device
//     on the device (vae_decode_resident_bytes more device memory, no host round trips).
//   - GroupNorms use the whole image's statistics: a step with n GroupNorms takes n + 1 passes over its
//     tiles, pass k gathering GroupNorm k's moments over the cores (pipeline/tiled_group_norm.h).
// Cost against the untiled decode: a resnet's first convolution runs twice (pass 1 stops at its second
// GroupNorm), so ~1.5x the up path's convolutions; the halo adds (tile + 2 halo)² / tile² per step; every
// pass uploads its tiles' inputs and each step downloads its output cores (on_device: slices and concats
// on the device instead); two small GEMMs per GroupNorm and tile gather the moments. Measured on the CPU
// (released config, random weights, 256x320 image, 2x3 tiles): 2.1x the untiled decode. One tile (latent
// no larger than `tile`) is the untiled decode, exactly.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>

#include "models/flux2_vae.h"

namespace ernie {

struct VaeTiling {
  int tile = 64;  // largest core side, in latent pixels (image pixels: tile * spatial_scale)
  int halo = 2;   // pixels of each step's input around a core (even; less than 2 leaves seams)
  bool on_device = false;  // keep each step's whole-image input and output on the VAE's device, not the host
};
// Throws Error naming the bad field unless tile >= 1 and halo is even, 0..16.
void check_vae_tiling(const VaeTiling& t);

// z [B, L, h, w] -> image [B, 3, h*s, w*s], F32 on the host.
Tensor vae_decode_tiled(const Flux2Vae& vae, const Tensor& z, const VaeTiling& t = {});
// image [B, 3, H, W] -> posterior mean [B, L, H/s, W/s], F32 on the host (tile in latent pixels).
Tensor vae_encode_mean_tiled(const Flux2Vae& vae, const Tensor& image, const VaeTiling& t = {});

// Bytes the untiled decode of an h×w latent needs at its widest layer (activations only), for deciding
// when to tile.
size_t vae_decode_bytes(const VaeConfig& c, int64_t h, int64_t w, DType act);
// Device bytes the tiled decode of an h×w latent needs: the untiled mid block, or one tile of one step.
size_t vae_decode_tiled_bytes(const VaeConfig& c, int64_t h, int64_t w, DType act, const VaeTiling& t);

// Extra device bytes VaeTiling::on_device takes for an h×w latent (whole-image activations of a step).
size_t vae_decode_resident_bytes(const VaeConfig& c, int64_t h, int64_t w, DType act);

// The automatic choice for a decode of an h×w latent with `free_bytes` of device memory (a 20% margin
// kept): nullopt when the untiled decode fits and `force` is off; else the default tile when forced and it
// fits, or the largest tile (256 latent pixels down to 16) whose tiled decode fits, or the smallest when
// none does; on_device when that still leaves room for vae_decode_resident_bytes.
std::optional<VaeTiling> auto_vae_tiling(const VaeConfig& c, int64_t h, int64_t w, DType act, size_t free_bytes,
                                         bool force = false);

}  // namespace ernie
