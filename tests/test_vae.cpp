// Flux2Vae on the CPU in fp32 against the diffusers reference: decode of a latent, encode to the posterior
// mean/logvar, the pipeline's de-normalisation + unpatchify feeding the decoder (end-to-end images of the
// golden cases), the patchify/normalise layout computed independently here, and clear errors for bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"
#include "golden.h"
#include "io/model_folder.h"
#include "models/flux2_vae.h"

using namespace ernie;

namespace {

const ModelFolder& tiny() {
  static ModelFolder m = ModelFolder::open(test::tiny_model(), false);
  return m;
}
const Flux2Vae& vae() {
  static Flux2Vae v = Flux2Vae::load(tiny(), kCPU, DType::F32);
  return v;
}

Tensor random_tensor(const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> v(size_t(shape_numel(shape)));
  for (float& x : v) x = nd(rng);
  return Tensor::from_vector(v, shape);
}

using ernie::test::expect_error;

}  // namespace

TEST(Flux2Vae, DecodeMatchesGolden) {
  const Tensor img = vae().decode(test::golden_tensor("vae.dec.z"));
  EXPECT_TRUE(test::tensors_close(img, test::golden_tensor("vae.dec.img"), test::kCpuRelL2));
}

// The decoder's activations in either layout (channels-last is the default above) give the golden image.
TEST(Flux2Vae, DecodeMatchesGoldenInEitherLayout) {
  for (ops::Layout lay : {ops::Layout::NCHW, ops::Layout::NHWC}) {
    const Flux2Vae v = Flux2Vae::load(tiny(), kCPU, DType::F32, lay);
    ASSERT_EQ(v.decode_layout(), lay);
    const Tensor img = v.decode(test::golden_tensor("vae.dec.z"));
    EXPECT_TRUE(test::tensors_close(img, test::golden_tensor("vae.dec.img"), test::kCpuRelL2))
        << (lay == ops::Layout::NHWC ? "NHWC" : "NCHW");
  }
}

TEST(Flux2Vae, EncodeMatchesGolden) {
  auto [mean, logvar] = vae().encode(test::golden_tensor("vae.enc.img"));
  EXPECT_TRUE(test::tensors_close(mean, test::golden_tensor("vae.enc.mean"), test::kCpuRelL2));
  EXPECT_TRUE(test::tensors_close(logvar, test::golden_tensor("vae.enc.logvar"), test::kCpuRelL2));
}

// The golden cases' final DiT latents through de-normalisation, unpatchify and decode reproduce the
// reference's float images ((img / 2 + 0.5) clamped to [0, 1], as [B, H, W, 3]).
TEST(Flux2Vae, DenormalizeUnpatchifyDecodeMatchesCaseImages) {
  for (int c = 0; c < 3; ++c) {
    const std::string p = "case." + std::to_string(c) + ".";
    const Tensor z = vae().denormalize_and_unpatchify(test::golden_tensor(p + "latents_final"));
    const Tensor img = vae().decode(z);
    const int64_t H = img.dim(2), W = img.dim(3);
    const std::vector<float> v = img.to_vector();
    std::vector<float> hwc(v.size());
    for (int64_t ch = 0; ch < 3; ++ch)
      for (int64_t y = 0; y < H; ++y)
        for (int64_t x = 0; x < W; ++x)
          hwc[size_t((y * W + x) * 3 + ch)] = std::clamp(v[size_t((ch * H + y) * W + x)] / 2 + 0.5f, 0.0f, 1.0f);
    EXPECT_TRUE(test::tensors_close(Tensor::from_vector(hwc, {1, H, W, 3}), test::golden_tensor(p + "image"),
                                    test::kCpuRelL2))
        << p;
  }
}

// patchify_and_normalize against the layout written out here: out[b, c*4 + dy*2 + dx, i, j] =
// (z[b, c, 2i + dy, 2j + dx] - running_mean) / sqrt(running_var + 1e-5), stats read from the checkpoint.
TEST(Flux2Vae, PatchifyNormalizeLayoutAndRoundTrip) {
  const int64_t B = 2, L = vae().config().latent_channels, H = 6, W = 4;
  const Tensor z = random_tensor({B, L, H, W}, 7);
  const Tensor packed = vae().patchify_and_normalize(z);
  ASSERT_EQ(packed.shape(), (Shape{B, 4 * L, H / 2, W / 2}));
  const std::vector<float> mean = tiny().vae_c.tensor("bn.running_mean").to_vector();
  const std::vector<float> var = tiny().vae_c.tensor("bn.running_var").to_vector();
  const std::vector<float> zv = z.to_vector();
  std::vector<float> want(zv.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < L; ++c)
      for (int64_t dy = 0; dy < 2; ++dy)
        for (int64_t dx = 0; dx < 2; ++dx)
          for (int64_t i = 0; i < H / 2; ++i)
            for (int64_t j = 0; j < W / 2; ++j) {
              const int64_t oc = c * 4 + dy * 2 + dx;
              const double x = zv[size_t(((b * L + c) * H + 2 * i + dy) * W + 2 * j + dx)];
              want[size_t(((b * 4 * L + oc) * (H / 2) + i) * (W / 2) + j)] =
                  float((x - mean[size_t(oc)]) / std::sqrt(double(var[size_t(oc)]) + 1e-5));
            }
  EXPECT_TRUE(test::tensors_close(packed, Tensor::from_vector(want, packed.shape()), 1e-6));
  // ... and denormalize_and_unpatchify inverts it.
  EXPECT_TRUE(test::tensors_close(vae().denormalize_and_unpatchify(packed), z, 1e-6));
}

TEST(Flux2Vae, BadInputGivesClearErrors) {
  const Flux2Vae& v = vae();
  const int64_t L = v.config().latent_channels;
  expect_error([&] { v.decode(random_tensor({1, L + 1, 4, 4}, 1)); }, "expected 8 channels");
  expect_error([&] { v.decode(random_tensor({L, 4, 4}, 1)); }, "[B, C, H, W]");
  expect_error([&] { v.decode(Tensor()); }, "undefined");
  expect_error([&] { v.encode(random_tensor({1, 4, 8, 8}, 1)); }, "expected 3 channels");
  expect_error([&] { v.encode(random_tensor({1, 3, 9, 8}, 1)); }, "multiples of 2");
  expect_error([&] { v.encode(random_tensor({1, 3, 8, 7}, 1)); }, "multiples of 2");
  expect_error([&] { v.denormalize_and_unpatchify(random_tensor({1, L, 3, 3}, 1)); }, "expected 32 channels");
  expect_error([&] { v.patchify_and_normalize(random_tensor({1, L, 5, 4}, 1)); }, "patch size 2");
  expect_error([&] { v.patchify_and_normalize(random_tensor({1, 4 * L, 4, 4}, 1)); }, "expected 8 channels");
  expect_error([&] { Flux2Vae::load(tiny(), kCPU, DType::BF16); }, "CPU computes in F32");
}
