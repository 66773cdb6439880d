// The live preview's latent-to-RGB projection (engine/latent_preview.h): un-patchify order, the factors and
// bias, the [-1, 1] -> 0..255 mapping, sizes, and bad shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "engine/latent_preview.h"

using namespace ernie;

namespace {
uint8_t byte_of(float v) { return uint8_t(std::lround(std::clamp((v + 1.0f) * 0.5f, 0.0f, 1.0f) * 255.0f)); }
}  // namespace

TEST(LatentPreview, ZeroLatentsGiveTheBiasColour) {
  const int64_t C = 128, h = 3, w = 5;
  std::vector<float> z(size_t(C * h * w), 0.0f);
  PreviewRgb p = latent_preview_rgb(z.data(), C, h, w);
  ASSERT_EQ(p.width, 10);
  ASSERT_EQ(p.height, 6);
  ASSERT_EQ(p.rgb.size(), size_t(10 * 6 * 3));
  for (size_t i = 0; i < p.rgb.size(); i += 3)
    for (int c = 0; c < 3; ++c) ASSERT_EQ(p.rgb[i + c], byte_of(latent_rgb_bias()[c])) << i;
}

TEST(LatentPreview, OneChannelLandsOnItsSubPixelWithItsFactors) {
  const int64_t C = 128, h = 2, w = 3;
  std::vector<float> z(size_t(C * h * w), 0.0f);
  // Latent channel 3 at sub-pixel (py 1, px 0) of latent pixel (y 0, x 2): patchified channel 3*4 + 1*2 + 0.
  const int64_t ch = 3 * 4 + 2, y = 0, x = 2;
  z[size_t(ch * h * w + y * w + x)] = 2.0f;
  PreviewRgb p = latent_preview_rgb(z.data(), C, h, w);
  const int oy = 1, ox = 4;  // y*2 + py, x*2 + px
  for (int yy = 0; yy < p.height; ++yy)
    for (int xx = 0; xx < p.width; ++xx)
      for (int c = 0; c < 3; ++c) {
        const float want = latent_rgb_bias()[c] + (yy == oy && xx == ox ? 2.0f * latent_rgb_factors()[3][c] : 0.0f);
        ASSERT_EQ(p.rgb[(size_t(yy) * p.width + xx) * 3 + c], byte_of(want)) << yy << "," << xx << "," << c;
      }
  // Channel 3 is a bright one in every colour: the pixel is lighter than the background.
  const size_t at = (size_t(oy) * p.width + ox) * 3;
  EXPECT_GT(p.rgb[at], p.rgb[0]);
  EXPECT_GT(p.rgb[at + 2], p.rgb[2]);
}

TEST(LatentPreview, SumsOverChannelsAndClamps) {
  const int64_t C = 128, h = 1, w = 1;
  std::vector<float> z(size_t(C), 0.0f);
  for (int64_t l = 0; l < 32; ++l) z[size_t(l * 4)] = 1.0f;  // sub-pixel (0, 0) of every latent channel
  PreviewRgb p = latent_preview_rgb(z.data(), C, h, w);
  for (int c = 0; c < 3; ++c) {
    float sum = latent_rgb_bias()[c];
    for (int l = 0; l < 32; ++l) sum += latent_rgb_factors()[l][c];
    EXPECT_EQ(p.rgb[size_t(c)], byte_of(sum));
  }
  for (float& v : z) v = 1000.0f;  // far out of range: clamped, not wrapped
  p = latent_preview_rgb(z.data(), C, h, w);
  for (uint8_t v : p.rgb) EXPECT_TRUE(v == 0 || v == 255);
}

TEST(LatentPreview, OtherLatentWidthsAndBadShapes) {
  // The tiny test model: 8 latent channels, 32 patchified.
  std::vector<float> z(size_t(32 * 4 * 4), 0.5f);
  PreviewRgb p = latent_preview_rgb(z.data(), 32, 4, 4);
  EXPECT_EQ(p.width, 8);
  EXPECT_EQ(p.height, 8);
  EXPECT_THROW(latent_preview_rgb(z.data(), 30, 4, 4), Error);
  EXPECT_THROW(latent_preview_rgb(z.data(), 0, 4, 4), Error);
  EXPECT_THROW(latent_preview_rgb(z.data(), 32, 0, 4), Error);
}
