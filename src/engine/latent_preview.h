// Live previews of the denoising loop, as ComfyUI's "latent2rgb" previews: a fixed linear map of the latent
// channels to RGB, cheap enough to run on every step on the CPU (no VAE).
//
// The DiT's latents are the Flux2 VAE's 32-channel latents 2×2-patchified to 128 channels (channel
// l·4 + py·2 + px is latent channel l at sub-pixel (py, px)) and BatchNorm-normalized (docs/DESIGN.md). The
// projection un-patchifies them, so a [4L, h, w] latent row gives a (2w)×(2h) image (1/8 of the output's
// sides: 128×128 for 1024²), and maps each pixel's L channels with ComfyUI's Flux2 `latent_rgb_factors` (32×3)
// and `latent_rgb_factors_bias`, then (v + 1) / 2 into 0..255. Models with another L (the tiny test model: 8)
// reuse the factors' rows cyclically: a rough picture, but one that follows the sampling.
#pragma once
#include <cstdint>
#include <vector>

namespace ernie {

struct PreviewRgb {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // width * height * 3, row-major
};

// `latents`: one image's row [channels, h, w] F32 on the host, channels = 4 · L (patch 2). Throws Error when
// channels is not a positive multiple of 4.
PreviewRgb latent_preview_rgb(const float* latents, int64_t channels, int64_t h, int64_t w);

// The factors (kPreviewLatentChannels rows of R, G, B) and the bias, for tests.
inline constexpr int kPreviewLatentChannels = 32;
const float (&latent_rgb_factors())[kPreviewLatentChannels][3];
const float (&latent_rgb_bias())[3];

}  // namespace ernie
