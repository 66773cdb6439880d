// img2img and inpainting (engine/init_image.h) against the golden cases of tests/data/img2img, made from the
// diffusers components with the semantics the issue writes down: x0 (the VAE encode, patchified and
// normalised), the final latents and the images, CPU f32; then the pieces (t_start, mask, resize, composite)
// and the requests that must be refused.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/engine.h"
#include "engine/init_image.h"
#include "img2img_cases.h"
#include "tiny_engine.h"
#include "io/model_folder.h"
#include "models/flux2_vae.h"

using namespace ernie;

namespace {

using test::tiny_engine;

const Flux2Vae& tiny_vae() {
  static Flux2Vae v = Flux2Vae::load(ModelFolder::open(test::tiny_model()), kCPU, DType::F32);
  return v;
}

int max_level_diff(const std::vector<uint8_t>& a, const Tensor& golden_image) {
  std::vector<float> g = golden_image.to_vector();
  EXPECT_EQ(a.size(), g.size());
  int worst = 0;
  for (size_t i = 0; i < std::min(a.size(), g.size()); ++i)
    worst = std::max(worst, std::abs(int(a[i]) - int(std::nearbyint(g[i] * 255.0f))));
  return worst;
}

}  // namespace

class Img2imgGolden : public ::testing::TestWithParam<int> {};

// x0: the input PNG as the VAE's input, encoded (the posterior's mode), patchified and normalised.
TEST_P(Img2imgGolden, EncodedImageMatchesReference) {
  const int n = GetParam();
  const GenerateRequest r = test::img2img_request(n);
  const Tensor x0 = tiny_vae().patchify_and_normalize(tiny_vae().encode(image_to_tensor(*r.init_image)).first);
  auto close = test::tensors_close(x0, test::img2img_tensor(n, "x0"), test::kCpuRelL2);
  EXPECT_TRUE(close) << "case " << n;
  std::printf("case %d x0: %s\n", n, close.message());
}

TEST_P(Img2imgGolden, StartStepMatchesReference) {
  const int n = GetParam();
  const nlohmann::json c = test::img2img_case(n);
  EXPECT_EQ(img2img_start_step(c["steps"].get<int>(), c["strength"].get<float>()), c["t_start"].get<int>());
}

TEST_P(Img2imgGolden, FinalLatentsAndImageMatchReference) {
  const int n = GetParam();
  const GenerateResult res = tiny_engine().generate(test::img2img_request(n));
  auto close = test::tensors_close(res.latents, test::img2img_tensor(n, "latents_final"), test::kCpuRelL2);
  EXPECT_TRUE(close) << "case " << n;
  std::printf("case %d (%s) latents_final: %s\n", n, test::img2img_case(n)["kind"].get<std::string>().c_str(),
              close.message());
  ASSERT_EQ(res.images.size(), 1u);
  EXPECT_LE(max_level_diff(res.images[0].rgb, test::img2img_tensor(n, "image")), 1) << "case " << n;
  EXPECT_GT(res.vae_encode_s, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Tiny, Img2imgGolden, ::testing::Range(0, test::kImg2imgCases));

// Strength 1 without a mask is text-to-image from the same noise, exactly.
TEST(Img2img, StrengthOneIsTextToImage) {
  GenerateRequest r = test::img2img_request(2);
  ASSERT_EQ(r.strength, 1.0f);
  const Tensor a = tiny_engine().generate(r).latents;
  r.init_image.reset();
  r.strength = -1;
  const Tensor b = tiny_engine().generate(r).latents;
  EXPECT_EQ(a.to_vector(), b.to_vector());
}

// A lower strength keeps more of the image: the result moves toward x0.
TEST(Img2img, LowerStrengthStaysCloserToTheImage) {
  GenerateRequest r = test::img2img_request(0);
  const Tensor x0 = test::img2img_tensor(0, "x0");
  auto dist = [&](float strength) {
    r.strength = strength;
    return test::closeness(tiny_engine().generate(r).latents.to_vector(), x0.to_vector()).rel_l2;
  };
  EXPECT_LT(dist(0.2f), dist(0.6f));
  EXPECT_LT(dist(0.6f), dist(1.0f));
}

// Inpainting keeps x0 exactly outside the mask (the last step blends to x0 itself), and --composite
// pastes the original pixels back there.
TEST(Img2img, InpaintKeepsTheUnmaskedLatentsAndCompositePastesPixels) {
  GenerateRequest r = test::img2img_request(3);
  const GenerateResult res = tiny_engine().generate(r);
  const std::vector<float> x0 =
      tiny_vae().patchify_and_normalize(tiny_vae().encode(image_to_tensor(*r.init_image)).first).to_vector();
  const std::vector<float> z = res.latents.to_vector();
  const Tensor m = latent_mask(mask_weights(*r.mask, 0), r.width, r.height, 1, res.latents.dim(1),
                               res.latents.dim(2), res.latents.dim(3));
  const std::vector<float> mv = m.to_vector();
  int kept = 0, repainted = 0;
  for (size_t i = 0; i < z.size(); ++i) {
    if (mv[i] == 0) {
      EXPECT_EQ(z[i], x0[i]) << i;
      ++kept;
    } else {
      repainted += z[i] != x0[i];
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(repainted, 0);

  r.composite = true;
  const GenerateResult c = tiny_engine().generate(r);
  const std::vector<float> w = mask_weights(*r.mask, 0);
  int pasted = 0, differ = 0;
  for (size_t i = 0; i < w.size(); ++i)
    for (size_t k = 0; k < 3; ++k) {
      if (w[i] == 0) {
        EXPECT_EQ(c.images[0].rgb[i * 3 + k], r.init_image->rgb[i * 3 + k]);
        ++pasted;
      }
      if (w[i] == 1) { EXPECT_EQ(c.images[0].rgb[i * 3 + k], res.images[0].rgb[i * 3 + k]); }
      differ += c.images[0].rgb[i * 3 + k] != res.images[0].rgb[i * 3 + k];
    }
  EXPECT_GT(pasted, 0);
  EXPECT_GT(differ, 0);  // without the composite the kept area is only the VAE's round trip
}

// Every image of a batch starts from the same x0 with its own noise.
TEST(Img2img, BatchSharesTheImage) {
  GenerateRequest r = test::img2img_request(1);
  r.init_latents.reset();
  r.num_images = 2;
  r.seed = 7;
  const GenerateResult res = tiny_engine().generate(r);
  ASSERT_EQ(res.images.size(), 2u);
  EXPECT_NE(res.images[0].rgb, res.images[1].rgb);
}

TEST(Img2imgParts, StartStep) {
  EXPECT_EQ(img2img_start_step(50, 1.0f), 0);
  EXPECT_EQ(img2img_start_step(50, 0.6f), 20);
  EXPECT_EQ(img2img_start_step(8, 0.35f), 5);   // 8 - 2.8 = 5.2
  EXPECT_EQ(img2img_start_step(5, 0.6f), 2);    // as Python's 5 - 5 * 0.6 = 2.0, not double(0.6f)'s 1.99999
  EXPECT_EQ(img2img_start_step(10, 0.3f), 7);
  EXPECT_EQ(img2img_start_step(50, 1e-20f), 50);  // nothing would run
}

TEST(Img2imgParts, MaskWeights) {
  Image m{2, 1, {255, 255, 255, 0, 0, 0}, {}};
  EXPECT_EQ(mask_weights(m, 0), (std::vector<float>{1.0f, 0.0f}));  // white repaints
  m.rgb = {255, 0, 0, 0, 0, 255};  // luminance: red 76, blue 29
  EXPECT_FLOAT_EQ(mask_weights(m, 0)[0], 76.0f / 255.0f);
  EXPECT_FLOAT_EQ(mask_weights(m, 0)[1], 29.0f / 255.0f);
  m.alpha = {255, 255};  // opaque alpha: luminance still decides
  EXPECT_FLOAT_EQ(mask_weights(m, 0)[0], 76.0f / 255.0f);
  m.alpha = {0, 255};  // transparency: transparent repaints (OpenAI), colour ignored
  EXPECT_EQ(mask_weights(m, 0), (std::vector<float>{1.0f, 0.0f}));
  // A blur spreads a hard edge and keeps the total.
  Image e{8, 1, {}, {}};
  for (int x = 0; x < 8; ++x) e.rgb.insert(e.rgb.end(), 3, x < 4 ? 255 : 0);
  std::vector<float> b = mask_weights(e, 1);
  EXPECT_GT(b[4], 0.0f);
  EXPECT_LT(b[3], 1.0f);
  EXPECT_NEAR(b[3] + b[4], 1.0f, 1e-5);
  test::expect_error([&] { mask_weights(e, kMaxMaskBlur + 1); }, "out of range");
}

TEST(Img2imgParts, LatentMaskIsBinarisedNearest) {
  // 4x2 pixels -> 2x1 latent: nearest takes pixel columns 0 and 2 of row 0.
  const std::vector<float> w = {0.5f, 0.0f, 0.49f, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  const Tensor m = latent_mask(w, 4, 2, 2, 3, 1, 2);
  EXPECT_EQ(m.shape(), (Shape{2, 3, 1, 2}));
  const std::vector<float> v = m.to_vector();
  for (size_t i = 0; i < v.size(); i += 2) {
    EXPECT_EQ(v[i], 1.0f);      // 0.5 repaints
    EXPECT_EQ(v[i + 1], 0.0f);  // 0.49 keeps
  }
}

TEST(Img2imgParts, ResizeKeepsFlatImagesAndAverages) {
  Image flat{6, 4, std::vector<uint8_t>(6 * 4 * 3, 77), {}};
  Image r = resize_image(flat, 3, 8);
  EXPECT_EQ(r.width, 3);
  EXPECT_EQ(r.height, 8);
  for (uint8_t v : r.rgb) EXPECT_EQ(v, 77);
  EXPECT_EQ(resize_image(flat, 6, 4).rgb, flat.rgb);  // same size: untouched
  // A fine checkerboard shrunk 4x is nearly flat grey (the filter widens when shrinking).
  Image chk{16, 16, {}, {}};
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 16; ++x) chk.rgb.insert(chk.rgb.end(), 3, (x + y) % 2 ? 255 : 0);
  for (uint8_t v : resize_image(chk, 4, 4).rgb) EXPECT_NEAR(v, 128, 3);
  test::expect_error([&] { resize_image(flat, 0, 4); }, "empty");
}

TEST(Img2imgParts, ImageToTensor) {
  const Tensor t = image_to_tensor(Image{1, 1, {0, 255, 51}, {}});
  EXPECT_EQ(t.shape(), (Shape{1, 3, 1, 1}));
  EXPECT_EQ(t.to_vector(), (std::vector<float>{-1.0f, 1.0f, 2.0f * (51.0f / 255.0f) - 1.0f}));
}

TEST(Img2imgRequest, BadRequestsAreRefused) {
  const ModelLimits& l = tiny_engine().limits();
  const GenerateRequest good = test::img2img_request(3);
  EXPECT_NO_THROW(resolve_request(good, l));
  auto with = [&](auto change) {
    GenerateRequest r = good;
    change(r);
    return r;
  };
  test::expect_error([&] { resolve_request(with([](auto& r) { r.init_image.reset(); }), l); }, "a mask needs an init image");
  test::expect_error([&] { resolve_request(with([](auto& r) { r.init_image.reset(), r.mask.reset(), r.strength = 0.5f; }), l); },
               "needs an init image");
  for (float s : {0.0f, -0.5f, 1.5f, NAN})
    test::expect_error([&] { resolve_request(with([&](auto& r) { r.strength = s; }), l); }, "must be in (0, 1]");
  test::expect_error([&] { resolve_request(with([](auto& r) { r.strength = 1e-20f; }), l); }, "runs no step");
  test::expect_error([&] { resolve_request(with([](auto& r) { r.width = 64, r.init_latents.reset(); }), l); },
               "differs from the requested 64x32");
  test::expect_error([&] { resolve_request(with([](auto& r) { r.mask->width = 16, r.mask->rgb.resize(16 * 32 * 3); }), l); },
               "differs from the init image's");
  test::expect_error([&] { resolve_request(with([](auto& r) { r.init_image->rgb.pop_back(); }), l); }, "bytes of RGB");
  test::expect_error([&] { resolve_request(with([](auto& r) { r.mask_blur = 1000; }), l); }, "mask blur");
  test::expect_error([&] { resolve_request(with([](auto& r) { r.mask.reset(), r.composite = true; }), l); }, "need a mask");
  test::expect_error([&] {
    resolve_request(with([](auto& r) { r.init_image = Image{20000, 20000, std::vector<uint8_t>(size_t(20000) * 20000 * 3), {}}, r.mask.reset(); }), l);
  }, "too large");
  // An unset size follows the image; resize takes it (and the mask) to another size.
  GenerateRequest u = with([](auto& r) { r.width = 0, r.height = 0, r.init_latents.reset(); });
  EXPECT_EQ(resolve_request(u, l).width, 32);
  u.width = 64, u.height = 16, u.resize = true;
  const GenerateRequest rs = resolve_request(u, l);
  EXPECT_EQ(rs.init_image->width, 64);
  EXPECT_EQ(rs.mask->height, 16);
  EXPECT_EQ(rs.strength, 1.0f);  // the inpainting default
  EXPECT_EQ(resolve_request(with([](auto& r) { r.mask.reset(), r.strength = -1; }), l).strength, 0.75f);
}
