// Request defaults and validation (no weights needed), and the documented initial-noise generator.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "golden.h"
#include "engine/metadata.h"
#include "engine/request.h"
#include "engine/noise.h"

using namespace ernie;

namespace {
ModelLimits tiny_limits() {
  ModelLimits l;
  l.scale_factor = 4;
  l.latent_channels = 32;
  return l;
}
std::string error_of(const GenerateRequest& r, const ModelLimits& l) {
  try {
    resolve_request(r, l);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
GenerateRequest req(int w, int h) {
  GenerateRequest r;
  r.prompt = "a cat";
  r.width = w;
  r.height = h;
  return r;
}
}  // namespace

TEST(Request, DefaultsFollowTheVariant) {
  ModelLimits l = tiny_limits();
  GenerateRequest r = resolve_request(GenerateRequest{}, l);
  EXPECT_EQ(r.width, 1024);
  EXPECT_EQ(r.height, 1024);
  EXPECT_EQ(r.steps, 50);
  EXPECT_EQ(r.cfg, 4.0f);
  l.turbo = true;
  r = resolve_request(GenerateRequest{}, l);
  EXPECT_EQ(r.steps, 8);
  EXPECT_EQ(r.cfg, 1.0f);
  GenerateRequest explicit_ = req(64, 32);
  explicit_.steps = 3;
  explicit_.cfg = 0;
  r = resolve_request(explicit_, l);
  EXPECT_EQ(r.steps, 3);
  EXPECT_EQ(r.cfg, 0.0f);
}

TEST(Request, BadInputsHaveClearMessages) {
  ModelLimits l = tiny_limits();
  EXPECT_NE(error_of(req(18, 16), l).find("width 18 is not a multiple of 4"), std::string::npos);
  EXPECT_NE(error_of(req(16, 30), l).find("height 30 is not a multiple of 4"), std::string::npos);
  EXPECT_NE(error_of(req(8192, 16), l).find("limit of 4096 pixels per side"), std::string::npos);
  EXPECT_NE(error_of(req(4096, 4096), l).find("pixels per image"), std::string::npos);
  EXPECT_NE(error_of(req(-4, 16), l).find("must be positive"), std::string::npos);
  GenerateRequest r = req(16, 16);
  r.steps = -1;
  EXPECT_NE(error_of(r, l).find("at least 1"), std::string::npos);
  r = req(16, 16);
  r.cfg = -2;
  EXPECT_NE(error_of(r, l).find("must not be negative"), std::string::npos);
  r.cfg = NAN;
  EXPECT_NE(error_of(r, l).find("finite"), std::string::npos);
  r = req(16, 16);
  r.num_images = 0;
  EXPECT_NE(error_of(r, l).find("number of images"), std::string::npos);
  r = req(16, 16);
  r.prompt = "a \xff cat";
  EXPECT_NE(error_of(r, l).find("prompt is not valid UTF-8 (byte 2)"), std::string::npos) << error_of(r, l);
  r = req(16, 16);
  r.negative_prompt = std::string("x\0y", 3);
  EXPECT_NE(error_of(r, l).find("negative prompt contains a NUL"), std::string::npos);
  EXPECT_EQ(error_of(req(16, 16), l), "");
}

TEST(Request, InitLatentsMustMatchTheRequest) {
  ModelLimits l = tiny_limits();
  GenerateRequest r = req(16, 24);
  r.init_latents = Tensor::zeros({1, 32, 6, 4}, DType::F32);
  EXPECT_EQ(error_of(r, l), "");
  r.init_latents = Tensor::zeros({1, 32, 4, 6}, DType::F32);  // transposed
  EXPECT_NE(error_of(r, l).find("does not match [1, 32, 6, 4]"), std::string::npos) << error_of(r, l);
  r.init_latents = Tensor::zeros({2, 32, 6, 4}, DType::F32);  // batch
  EXPECT_NE(error_of(r, l).find("does not match"), std::string::npos);
  std::vector<float> v(32 * 24, 0.f);
  v[5] = INFINITY;
  r.init_latents = Tensor::from_vector(v, {1, 32, 6, 4});
  EXPECT_NE(error_of(r, l).find("non-finite"), std::string::npos);
}

TEST(Noise, DeterministicPerImageSeeds) {
  Tensor a = initial_noise({2, 8, 4, 4}, 42), b = initial_noise({2, 8, 4, 4}, 42);
  EXPECT_EQ(a.to_vector(), b.to_vector());
  // Image 1 of a batch is the single image of seed + 1.
  Tensor one = initial_noise({1, 8, 4, 4}, 43);
  std::vector<float> av = a.to_vector(), ov = one.to_vector();
  EXPECT_TRUE(std::equal(ov.begin(), ov.end(), av.begin() + 128));
  EXPECT_NE(initial_noise({1, 8, 4, 4}, 42).to_vector(), ov);
}

TEST(Noise, IsStandardNormal) {
  std::vector<float> v = initial_noise({1, 32, 64, 64}, 7).to_vector();
  double mean = 0, var = 0;
  for (float x : v) mean += x;
  mean /= double(v.size());
  for (float x : v) var += (x - mean) * (x - mean);
  var /= double(v.size());
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(var, 1.0, 0.02);
}

// Seeds (issue 26): -1 is random, every other value is a 64-bit integer, anything else is an error naming it.
TEST(Request, SeedParsing) {
  EXPECT_FALSE(parse_seed("-1").has_value());
  EXPECT_EQ(parse_seed("0"), 0u);
  EXPECT_EQ(parse_seed("18446744073709551615"), UINT64_MAX);
  for (const char* bad : {"-2", "-18446744073709551615", "1.5", "1e3", "abc", "", " 3", "+3", "0x10", "3 "})
    test::expect_error([&] { parse_seed(bad); }, "a seed is -1 (random) or an integer from 0 to");
  test::expect_error([] { parse_seed("18446744073709551616"); }, "out of range");
  test::expect_error([] { parse_seed(std::string(21, '1')); }, "a seed is -1 (random)");
  test::expect_error([] { parse_seed("-5", "-s"); }, "-s '-5'");
}

// With the ernie generator image k of a batch records seed + k, the seed that drew it, in both metadata chunks
// (issue 26: the server wrote the batch's seed on every image); noise from a file without a seed records none.
// With torch's generators the batch is one draw: every image records the batch's seed and its position.
TEST(Request, BatchImageMetadataCarriesItsOwnSeed) {
  GenerateResult res;
  res.resolved = req(16, 16);
  res.resolved.seed = 42;
  res.images.resize(2);
  const ImageMeta t = image_meta(res, 1, "tiny", res.resolved.seed);
  EXPECT_EQ(t.seed, 42u);
  EXPECT_NE(a1111_parameters(t).find("Seed: 42, Size: 16x16"), std::string::npos) << a1111_parameters(t);
  EXPECT_NE(a1111_parameters(t).find("RNG: CPU"), std::string::npos) << a1111_parameters(t);
  res.resolved.rng = NoiseRng::Ernie;
  res.images.resize(2);
  const ImageMeta m = image_meta(res, 1, "tiny", res.resolved.seed);
  EXPECT_EQ(m.seed, 43u);
  EXPECT_NE(a1111_parameters(m).find("Seed: 43, Size: 16x16"), std::string::npos) << a1111_parameters(m);
  EXPECT_NE(a1111_parameters(m).find("Batch size: 2, Batch pos: 1"), std::string::npos);
  EXPECT_EQ(meta_json(m)["seed"], 43u);
  const ImageMeta none = image_meta(res, 1, "tiny", std::nullopt);
  EXPECT_TRUE(meta_json(none)["seed"].is_null());
  EXPECT_EQ(a1111_parameters(none).find("Seed:"), std::string::npos);
}

// At cfg <= 1 no negative row runs, so the negative prompt is dropped (not recorded as if it had been used).
TEST(Request, NegativePromptDroppedWithoutGuidance) {
  GenerateRequest r = req(16, 16);
  r.negative_prompt = "blurry";
  r.cfg = 1.0f;
  EXPECT_EQ(resolve_request(r, tiny_limits()).negative_prompt, "");
  r.cfg = 2.0f;
  EXPECT_EQ(resolve_request(r, tiny_limits()).negative_prompt, "blurry");
}

// One place for each decision: the seed is drawn once, by resolve_request, and a resolved request passes through
// every later layer unchanged (so no layer draws again or re-decides a default).
TEST(Request, ResolvesOnceAndDrawsTheSeedOnce) {
  const ModelLimits l = tiny_limits();
  GenerateRequest q = req(16, 16);
  q.seed_random = true;
  const GenerateRequest r = resolve_request(q, l);
  EXPECT_TRUE(r.resolved);
  EXPECT_FALSE(r.seed_random);
  EXPECT_LE(r.seed, 0xffffffffull);  // 32 bits: exact in JavaScript
  const GenerateRequest again = resolve_request(r, l);
  EXPECT_EQ(again.seed, r.seed);
  bool differs = false;  // unresolved, each resolve draws anew (2^-32 per pair to collide)
  for (int i = 0; i < 4 && !differs; ++i) differs = resolve_request(q, l).seed != r.seed;
  EXPECT_TRUE(differs);
  GenerateRequest fixed = req(16, 16);
  fixed.seed = 42;
  EXPECT_EQ(resolve_request(fixed, l).seed, 42u);
  GenerateRequest bad = req(18, 16);  // a request that fails draws no seed
  bad.seed_random = true;
  EXPECT_THROW(resolve_request(bad, l), Error);
  GenerateRequest shared = req(16, 16);  // the shared queue fixes the seed at submission
  shared.seed_random = true;
  draw_seed(shared);
  EXPECT_FALSE(shared.seed_random);
  EXPECT_EQ(resolve_request(shared, l).seed, shared.seed);
}

TEST(Request, SizeRulesAndFirstStepAreOneFunctionEach) {
  const ModelLimits l = tiny_limits();
  GenerateRequest q;
  EXPECT_EQ(request_size(q, l), std::make_pair(1024, 1024));
  q.init_image = Image{24, 8, std::vector<uint8_t>(24 * 8 * 3, 0), {}};
  EXPECT_EQ(request_size(q, l), std::make_pair(24, 8));  // an unset size follows the init image
  q.width = 32;
  EXPECT_EQ(request_size(q, l), std::make_pair(32, 8));
  q.init_latents = Tensor::zeros({1, 32, 3, 5}, DType::F32);
  q.width = 0;
  EXPECT_EQ(request_size(q, l), std::make_pair(20, 12));  // then the noise's shape wins
  EXPECT_NO_THROW(check_size(16, 16, l));
  EXPECT_THROW(check_size(18, 16, l), Error);
  EXPECT_THROW(check_size(16, l.max_side + 4, l), Error);

  GenerateRequest t = req(16, 16);
  t.steps = 50;
  EXPECT_EQ(first_step(resolve_request(t, l)), 0);
  t.init_image = Image{16, 16, std::vector<uint8_t>(16 * 16 * 3, 0), {}};
  t.strength = 0.6f;
  const GenerateRequest r = resolve_request(t, l);
  EXPECT_EQ(first_step(r), 20);  // diffusers' t_start = int(N - N * strength)
  EXPECT_EQ(steps_run(r), 30);
}
