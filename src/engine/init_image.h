// img2img and inpainting inputs, with diffusers' Flux img2img/inpaint semantics (ERNIE-Image ships no such
// pipeline; issue 24 writes them down):
// - the image becomes x / 255 * 2 - 1 in F32 (VaeImageProcessor), is VAE-encoded (the posterior's mode),
//   patchified and normalised: x0;
// - the loop runs steps t_start.. of the full N-step schedule, t_start = int(max(N - min(N * strength, N), 0)),
//   from s * noise + (1 - s) * x0 with s = sigmas[t_start];
// - a mask (white = repaint) is binarised at 0.5 and taken to the latent grid by nearest; after every step
//   x = (1 - m) * (s_next * noise + (1 - s_next) * x0) + m * x, and x0 itself after the last.
#pragma once
#include <vector>

#include "core/tensor.h"
#include "engine/image.h"

namespace ernie {

constexpr float kDefaultStrength = 0.75f;  // img2img without a mask (stable-diffusion.cpp's and A1111's default)
constexpr float kDefaultInpaintStrength = 1.0f;  // with a mask: the masked area is painted anew
constexpr int kMaxMaskBlur = 256;

// The first step of N that img2img at `strength` (0, 1] runs; N when none would run.
int img2img_start_step(int steps, float strength);

// Throws Error unless `img` holds width * height * 3 bytes (and alpha, if any, width * height), naming `what`.
void check_image(const Image& img, const char* what);

// The image resized to width x height: separable Lanczos (a = 3), widened when shrinking, as PIL's
// Image.resize(LANCZOS) (in float, so not bit-identical to PIL's fixed point). Alpha is resized too.
Image resize_image(const Image& img, int width, int height);

// [1, 3, H, W] F32 host in [-1, 1]: pixel / 255 * 2 - 1, the VAE's input.
Tensor image_to_tensor(const Image& img);

// The repaint weight of every pixel in [0, 1], row-major H * W. A mask with transparency (any alpha below
// 255) repaints where it is transparent, as OpenAI's edits mask does: 1 - alpha / 255. Otherwise white
// repaints: PIL's luminance L (299/587/114) / 255. `blur` > 0 smooths it with a Gaussian of sigma `blur`
// pixels (A1111's mask blur), edges clamped.
std::vector<float> mask_weights(const Image& mask, int blur);

// The latent mask [B, C, h, w] F32 host: weights (W x H pixels) binarised at 0.5 (>= 0.5 repaints), then
// nearest-resized to h x w as torch.nn.functional.interpolate(mode="nearest"): src = floor(dst * in / out).
Tensor latent_mask(const std::vector<float>& weights, int W, int H, int64_t B, int64_t C, int64_t h, int64_t w);

// A1111's final composite: generated * m + original * (1 - m) per pixel, m = weights, on the [0, 1] floats
// (H * W * 3, updated) and the 8-bit pixels (re-rounded from them).
void composite_over(const Image& original, const std::vector<float>& weights, float* image_f32, std::vector<uint8_t>& rgb);

}  // namespace ernie
