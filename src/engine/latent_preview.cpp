#include "engine/latent_preview.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace ernie {
namespace {
// ComfyUI comfy/latent_formats.py, class Flux2: latent_rgb_factors (per VAE latent channel: R, G, B) and
// latent_rgb_factors_bias; they apply to the normalized latents the model samples.
constexpr float kFactors[kPreviewLatentChannels][3] = {
    {0.0058f, 0.0113f, 0.0073f},    {0.0495f, 0.0443f, 0.0836f},    {-0.0099f, 0.0096f, 0.0644f},
    {0.2144f, 0.3009f, 0.3652f},    {0.0166f, -0.0039f, -0.0054f},  {0.0157f, 0.0103f, -0.0160f},
    {-0.0398f, 0.0902f, -0.0235f},  {-0.0052f, 0.0095f, 0.0109f},   {-0.3527f, -0.2712f, -0.1666f},
    {-0.0301f, -0.0356f, -0.0180f}, {-0.0107f, 0.0078f, 0.0013f},   {0.0746f, 0.0090f, -0.0941f},
    {0.0156f, 0.0169f, 0.0070f},    {-0.0034f, -0.0040f, -0.0114f}, {0.0032f, 0.0181f, 0.0080f},
    {-0.0939f, -0.0008f, 0.0186f},  {0.0018f, 0.0043f, 0.0104f},    {0.0284f, 0.0056f, -0.0127f},
    {-0.0024f, -0.0022f, -0.0030f}, {0.1207f, -0.0026f, 0.0065f},   {0.0128f, 0.0101f, 0.0142f},
    {0.0137f, -0.0072f, -0.0007f},  {0.0095f, 0.0092f, -0.0059f},   {0.0000f, -0.0077f, -0.0049f},
    {-0.0465f, -0.0204f, -0.0312f}, {0.0095f, 0.0012f, -0.0066f},   {0.0290f, -0.0034f, 0.0025f},
    {0.0220f, 0.0169f, -0.0048f},   {-0.0332f, -0.0457f, -0.0468f}, {-0.0085f, 0.0389f, 0.0609f},
    {-0.0076f, 0.0003f, -0.0043f},  {-0.0111f, -0.0460f, -0.0614f},
};
constexpr float kBias[3] = {-0.0329f, -0.0718f, -0.0851f};

uint8_t to_byte(float v) {
  const float x = std::clamp((v + 1.0f) * 0.5f, 0.0f, 1.0f);  // [-1, 1] -> [0, 1], as ComfyUI's preview
  return uint8_t(std::lround(x * 255.0f));
}
}  // namespace

const float (&latent_rgb_factors())[kPreviewLatentChannels][3] { return kFactors; }
const float (&latent_rgb_bias())[3] { return kBias; }

PreviewRgb latent_preview_rgb(const float* latents, int64_t channels, int64_t h, int64_t w) {
  constexpr int p = 2;
  ERNIE_CHECK(channels > 0 && channels % (p * p) == 0 && h > 0 && w > 0, "latent preview: expected [4L, h, w] latents, got [",
              std::to_string(channels), ", ", std::to_string(h), ", ", std::to_string(w), "]");
  const int64_t L = channels / (p * p), plane = h * w;
  PreviewRgb out;
  out.width = int(w * p);
  out.height = int(h * p);
  out.rgb.assign(size_t(out.width) * size_t(out.height) * 3, 0);
  std::vector<float> acc(size_t(out.width) * size_t(out.height) * 3);
  for (size_t i = 0; i < acc.size() / 3; ++i)
    for (int c = 0; c < 3; ++c) acc[i * 3 + c] = kBias[c];
  // Channel l*4 + py*2 + px holds latent channel l at pixel (y*2 + py, x*2 + px).
  for (int64_t l = 0; l < L; ++l) {
    const float* f = kFactors[l % kPreviewLatentChannels];
    for (int py = 0; py < p; ++py)
      for (int px = 0; px < p; ++px) {
        const float* src = latents + (l * p * p + py * p + px) * plane;
        for (int64_t y = 0; y < h; ++y) {
          float* row = acc.data() + (size_t(y * p + py) * size_t(out.width) + size_t(px)) * 3;
          for (int64_t x = 0; x < w; ++x) {
            const float v = src[y * w + x];
            float* o = row + size_t(x) * p * 3;
            o[0] += v * f[0];
            o[1] += v * f[1];
            o[2] += v * f[2];
          }
        }
      }
  }
  for (size_t i = 0; i < acc.size(); ++i) out.rgb[i] = to_byte(acc[i]);
  return out;
}

}  // namespace ernie
