// Tiled VAE decode/encode against the untiled result (pipeline/vae_tiling.h) on the tiny fixture and on a
// deeper random config: PSNR >= 40 dB (the bar) and max abs difference, no seam (the error next to
// the cores' borders is not larger than inside them; without a halo it is), one tile is exact, and bad
// arguments give clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "golden.h"
#include "io/model_folder.h"
#include "ops/ops.h"
#include "models/vae_tiling.h"

using namespace ernie;

namespace {

const Flux2Vae& vae() {
  static const ModelFolder m = ModelFolder::open(test::tiny_model());
  static const Flux2Vae v = Flux2Vae::load(m, kCPU, DType::F32);
  return v;
}

using Diff = test::PsnrDiff;
Diff diff(const Tensor& a, const Tensor& b) { return test::psnr_diff(a, b, 2.0); }  // images in [-1, 1]

// PSNR of a against b on b's own peak-to-peak range (for posterior means, which are not in [-1, 1]).
double psnr_on_range(const Tensor& a, const Tensor& b) { return test::psnr_diff(a, b).psnr; }

// A latent with structure at several scales and a per-channel offset, so tiles see different statistics.
Tensor test_latent(int64_t L, int64_t h, int64_t w) {
  std::vector<float> v(size_t(L * h * w));
  for (int64_t c = 0; c < L; ++c)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x)
        v[size_t((c * h + y) * w + x)] = 1.5f * std::sin(0.21f * float(x) + 0.5f * float(c)) * std::cos(0.17f * float(y)) +
                                         0.8f * std::sin(0.05f * float(x * y) / float(h)) + 0.1f * float(c % 3) +
                                         (x > w / 3 ? 0.7f : -0.4f);
  return Tensor::from_vector(v, {1, L, h, w});
}

// Mean |a - b| over pixels within `band` pixels of a core border (image rows in `rows`, columns in
// `cols`) and over all other pixels.
std::pair<double, double> seam_and_rest(const Tensor& a, const Tensor& b, const std::vector<int64_t>& rows,
                                        const std::vector<int64_t>& cols, int64_t band) {
  const std::vector<float> x = a.to_vector(), y = b.to_vector();
  const int64_t BC = a.dim(0) * a.dim(1), H = a.dim(2), W = a.dim(3);
  auto near = [&](int64_t p, const std::vector<int64_t>& borders) {
    for (int64_t c : borders)
      if (p >= c - band && p < c + band) return true;
    return false;
  };
  double seam = 0, rest = 0;
  int64_t ns = 0, nr = 0;
  for (int64_t c = 0; c < BC; ++c)
    for (int64_t r = 0; r < H; ++r)
      for (int64_t q = 0; q < W; ++q) {
        const size_t i = size_t((c * H + r) * W + q);
        const double e = std::fabs(double(x[i]) - double(y[i]));
        const bool s = near(r, rows) || near(q, cols);
        (s ? seam : rest) += e;
        ++(s ? ns : nr);
      }
  return {seam / double(ns), rest / double(nr)};
}

}  // namespace

// 24x28 latent in cores of at most 10 pixels: a 3x3 grid of tiles.
TEST(VaeTiling, DecodeMatchesUntiled) {
  const Tensor z = test_latent(vae().config().latent_channels, 24, 28);
  const Tensor full = vae().decode(z);
  const Tensor tiled = vae_decode_tiled(vae(), z, {.tile = 10});
  ASSERT_EQ(tiled.shape(), full.shape());
  const Diff d = diff(tiled, full);
  std::printf("tiled decode, 24x28 latent, tile 10: PSNR %.1f dB, max abs %.2e\n", d.psnr, d.max_abs);
  EXPECT_GE(d.psnr, 40.0);
  EXPECT_LT(d.max_abs, 1e-3);

  // Seams: near the core borders (latent rows 8, 16 and columns 9, 18 here) the error is no larger than
  // elsewhere. The absolute floor keeps float rounding noise from deciding the ratio.
  const int64_t s = vae().config().spatial_scale();
  const auto [seam, rest] = seam_and_rest(tiled, full, {8 * s, 16 * s}, {9 * s, 18 * s}, s);
  std::printf("mean abs error within %lld px of a core border %.2e, elsewhere %.2e\n", (long long)s, seam, rest);
  EXPECT_LT(seam, 2 * rest + 1e-6);
}

// The same with each step's activations kept on the device (here the CPU): slices and concats instead of
// host copies, same result.
TEST(VaeTiling, OnDeviceMatchesUntiled) {
  const Tensor z = test_latent(vae().config().latent_channels, 24, 28);
  const Tensor full = vae().decode(z);
  const Diff d = diff(vae_decode_tiled(vae(), z, {.tile = 10, .on_device = true}), full);
  std::printf("tiled decode on the device, 24x28 latent, tile 10: PSNR %.1f dB, max abs %.2e\n", d.psnr, d.max_abs);
  EXPECT_GE(d.psnr, 40.0);
  EXPECT_LT(d.max_abs, 1e-3);
  const Tensor img = ops::clamp(full, -1.f, 1.f);
  const Diff e = diff(vae_encode_mean_tiled(vae(), img, {.tile = 10, .on_device = true}), vae().encode(img).first);
  std::printf("tiled encode on the device: max abs %.2e\n", e.max_abs);
  EXPECT_LT(e.max_abs, 1e-3);
}

// Without the halo the convolutions at a core's border see zeros instead of the neighbour: a seam, and
// the seam test sees it.
TEST(VaeTiling, NoHaloShowsAtTheSeams) {
  const Tensor z = test_latent(vae().config().latent_channels, 20, 20);
  const Tensor full = vae().decode(z);
  const Tensor tiled = vae_decode_tiled(vae(), z, {.tile = 10, .halo = 0});
  const int64_t s = vae().config().spatial_scale();
  const auto [seam, rest] = seam_and_rest(tiled, full, {10 * s}, {10 * s}, s);
  std::printf("halo 0: PSNR %.1f dB, seam %.2e vs elsewhere %.2e\n", diff(tiled, full).psnr, seam, rest);
  EXPECT_GT(seam, 2 * rest + 1e-6);
}

// An NCHW decoder tiles the same way (the default decoder is channels-last).
TEST(VaeTiling, NchwDecoderMatchesUntiled) {
  static const ModelFolder m = ModelFolder::open(test::tiny_model());
  const Flux2Vae nchw = Flux2Vae::load(m, kCPU, DType::F32, ops::Layout::NCHW);
  const Tensor z = test_latent(nchw.config().latent_channels, 16, 20);
  const Tensor full = nchw.decode(z);
  EXPECT_TRUE(test::tensors_close(full, vae().decode(z), 1e-5));
  for (bool on_device : {false, true}) {
    const Diff d = diff(vae_decode_tiled(nchw, z, {.tile = 8, .on_device = on_device}), full);
    std::printf("NCHW decoder, tiled decode 16x20 latent, tile 8, on_device %d: PSNR %.1f dB\n", int(on_device), d.psnr);
    EXPECT_GE(d.psnr, 40.0);
  }
}

TEST(VaeTiling, OneTileIsExact) {
  const Tensor z = test_latent(vae().config().latent_channels, 12, 10);
  EXPECT_EQ(vae_decode_tiled(vae(), z, {.tile = 16}).to_vector(), vae().decode(z).to_vector());
}

// Two batch rows with different content: each normalises with its own image's statistics.
TEST(VaeTiling, BatchRowsKeepTheirOwnStatistics) {
  const int64_t L = vae().config().latent_channels;
  const Tensor a = test_latent(L, 16, 16), b = test_latent(L, 16, 16);
  std::vector<float> v = a.to_vector(), w = b.to_vector();
  for (float& x : w) x = 0.5f * x - 0.3f;
  v.insert(v.end(), w.begin(), w.end());
  const Tensor z = Tensor::from_vector(v, {2, L, 16, 16});
  const Diff d = diff(vae_decode_tiled(vae(), z, {.tile = 8}), vae().decode(z));
  std::printf("batch of 2, 16x16 latent, tile 8: PSNR %.1f dB, max abs %.2e\n", d.psnr, d.max_abs);
  EXPECT_GE(d.psnr, 40.0);
}

// A deeper VAE (4 blocks: three resolution changes, channel changes with conv_shortcut, 25 GroupNorms in
// the up path) with small random weights: tiles must line up at every resolution, decode and encode.
TEST(VaeTiling, DeepConfigMatchesUntiled) {
  VaeConfig c;
  c.block_out_channels = {8, 16, 16, 16};
  c.norm_num_groups = 4;
  c.latent_channels = 4;
  const Flux2Vae deep = Flux2Vae::random(c, kCPU, DType::F32, 5);
  const Tensor z = test_latent(c.latent_channels, 12, 20);
  const Tensor full = deep.decode(z);
  const Diff d = diff(vae_decode_tiled(deep, z, {.tile = 6}), full);
  std::printf("deep config decode, 12x20 latent, tile 6: PSNR %.1f dB, max abs %.2e\n", d.psnr, d.max_abs);
  EXPECT_GE(d.psnr, 40.0);
  const Tensor mean = deep.encode(full).first;
  const Tensor tiled_mean = vae_encode_mean_tiled(deep, full, {.tile = 6});
  const double pe = psnr_on_range(tiled_mean, mean);
  std::printf("deep config encode, 96x160 image, tile 6: PSNR %.1f dB on its range, max abs %.2e\n", pe,
              diff(tiled_mean, mean).max_abs);
  EXPECT_GE(pe, 40.0);
}

// 48x56 image = 24x28 latent in cores of at most 10 pixels (3x3 tiles).
TEST(VaeTiling, EncodeMatchesUntiled) {
  const Tensor img = vae().decode(test_latent(vae().config().latent_channels, 24, 28));
  const Tensor full = vae().encode(img).first;
  const Tensor tiled = vae_encode_mean_tiled(vae(), img, {.tile = 10});
  ASSERT_EQ(tiled.shape(), full.shape());
  const Diff d = diff(tiled, full);
  const double p = psnr_on_range(tiled, full);
  std::printf("tiled encode, 48x56 image, tile 10: PSNR %.1f dB on its range, max abs %.2e\n", p, d.max_abs);
  EXPECT_GE(p, 40.0);
  EXPECT_LT(d.max_abs, 1e-3);
}

TEST(VaeTiling, BadArguments) {
  const Tensor z = test_latent(vae().config().latent_channels, 8, 8);
  auto expect_error = [&](const VaeTiling& t, const std::string& text) {
    try {
      vae_decode_tiled(vae(), z, t);
      ADD_FAILURE() << "no error for " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  expect_error({.tile = 0}, "tile 0 must be at least 1 latent pixel");
  expect_error({.tile = 4, .halo = -2}, "halo -2 must be an even number of pixels from 0 to 16");
  expect_error({.tile = 4, .halo = 3}, "halo 3 must be an even number");
  expect_error({.tile = 4, .halo = 18}, "halo 18 must be an even number");
  EXPECT_THROW(vae_encode_mean_tiled(vae(), Tensor::zeros({1, 3, 9, 8}, DType::F32), {.tile = 2}), Error);
  EXPECT_THROW(vae_decode_tiled(vae(), Tensor::zeros({8, 8}, DType::F32), {}), Error);
  EXPECT_THROW(vae_decode_tiled(vae(), Tensor::zeros({1, 3, 8, 8}, DType::F32), {.tile = 4}), Error);  // channels
}

// Automatic tiling: none when the untiled decode fits, a tile that fits when it does not.
TEST(VaeTiling, AutoChoice) {
  const VaeConfig c;  // the released sizes
  const size_t full = vae_decode_bytes(c, 256, 256, DType::BF16);  // 2048² image
  EXPECT_FALSE(auto_vae_tiling(c, 256, 256, DType::BF16, 2 * full).has_value());
  const auto t = auto_vae_tiling(c, 256, 256, DType::BF16, full / 4);
  ASSERT_TRUE(t.has_value());
  EXPECT_LT(t->tile, 256);
  EXPECT_LE(double(vae_decode_tiled_bytes(c, 256, 256, DType::BF16, *t)), 0.8 * double(full / 4));
  // Forced: the default tile when it fits, activations on the device when they fit too.
  const auto f = auto_vae_tiling(c, 256, 256, DType::BF16, 2 * full, true);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->tile, VaeTiling{}.tile);
  EXPECT_TRUE(f->on_device);
  EXPECT_FALSE(auto_vae_tiling(c, 256, 256, DType::BF16, vae_decode_tiled_bytes(c, 256, 256, DType::BF16, {}) * 2, true)
                   ->on_device);
}
