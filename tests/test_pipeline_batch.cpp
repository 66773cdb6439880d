// Pipeline::generate_batch (the server runs waiting requests of one shape together): every request in a
// batch gets exactly what generate() gives it alone, whatever its neighbours' prompts, negative prompts,
// seeds and image counts; golden case 0 stays within the reference tolerance inside a batch.
#include <gtest/gtest.h>


#include "core/error.h"
#include "golden.h"
#include "golden_cases.h"
#include "engine/engine.h"

using namespace ernie;

namespace {

Engine& tiny() {
  static std::unique_ptr<Engine> p = [] {
    EngineOptions o;
    o.device = "cpu";
    o.default_offload = Offload::None;  // resident: one load for every test
    o.model = test::tiny_model();
    o.threads = 1;
    return Engine::open(o);
  }();
  return *p;
}

int max_pixel_diff(const Image& a, const Image& b) {
  if (a.rgb.size() != b.rgb.size()) return 256;
  int m = 0;
  for (size_t i = 0; i < a.rgb.size(); ++i) m = std::max(m, std::abs(int(a.rgb[i]) - int(b.rgb[i])));
  return m;
}

void expect_same(const GenerateResult& batched, const GenerateResult& alone, const char* what) {
  EXPECT_TRUE(test::tensors_close(batched.latents, alone.latents, 1e-5)) << what;
  ASSERT_EQ(batched.images.size(), alone.images.size()) << what;
  for (size_t i = 0; i < alone.images.size(); ++i) EXPECT_LE(max_pixel_diff(batched.images[i], alone.images[i]), 1) << what;
  EXPECT_EQ(batched.revised_prompt, alone.revised_prompt);
  EXPECT_EQ(batched.resolved.seed, alone.resolved.seed);
}

}  // namespace

TEST(PipelineBatch, GoldenCaseInsideABatch) {
  EXPECT_GT(tiny().max_batch_images(), 1);
  GenerateRequest a = test::golden_case(0);
  GenerateRequest b = a;  // same shape; a longer prompt (text padding), a negative prompt, other noise
  b.prompt = "一只黑白相间的中华田园犬, sitting on a wooden porch at dusk";
  b.negative_prompt = "blurry";
  b.init_latents.reset();
  b.seed = 5;
  std::vector<GenerateResult> r = tiny().generate_batch({a, b});
  ASSERT_EQ(r.size(), 2u);
  auto lat = test::tensors_close(r[0].latents, test::golden_tensor("case.0.latents_final"), test::kCpuRelL2);
  auto img = test::tensors_close(r[0].image_f32, test::golden_tensor("case.0.image"), test::kCpuRelL2);
  EXPECT_TRUE(lat);
  EXPECT_TRUE(img);
  std::printf("golden case 0 batched with another request: latents %s; image %s\n", lat.message(), img.message());
  expect_same(r[1], tiny().generate(b), "second request");
}

TEST(PipelineBatch, SeedsAndImageCountsPerRequest) {
  GenerateRequest a;
  a.prompt = "a cat";
  a.width = 16;
  a.height = 16;
  a.steps = 2;
  a.seed = 7;
  a.num_images = 2;
  GenerateRequest b = a;
  b.prompt = "a lighthouse on a cliff";
  b.seed = 9;
  b.num_images = 1;
  GenerateRequest c = a;
  c.seed = 7;  // same as a: must give a's first image
  c.num_images = 1;
  std::vector<GenerateResult> r = tiny().generate_batch({a, b, c});
  ASSERT_EQ(r.size(), 3u);
  expect_same(r[0], tiny().generate(a), "a");
  expect_same(r[1], tiny().generate(b), "b");
  EXPECT_LE(max_pixel_diff(r[2].images[0], r[0].images[0]), 1);
  EXPECT_GT(max_pixel_diff(r[0].images[0], r[1].images[0]), 1);
}

TEST(PipelineBatch, RejectsMixedShapes) {
  GenerateRequest a;
  a.prompt = "a cat";
  a.width = a.height = 16;
  a.steps = 2;
  GenerateRequest b = a;
  b.steps = 3;
  EXPECT_THROW(tiny().generate_batch({a, b}), Error);
  b = a;
  b.width = 32;
  EXPECT_THROW(tiny().generate_batch({a, b}), Error);
  b = a;
  b.cfg = 1;
  EXPECT_THROW(tiny().generate_batch({a, b}), Error);
  EXPECT_THROW(tiny().generate_batch({}), Error);
}

TEST(PipelineBatch, CancelStopsTheWholeBatch) {
  GenerateRequest a;
  a.prompt = "a cat";
  a.width = a.height = 16;
  a.steps = 50;
  std::atomic<bool> cancel{false};
  int seen = 0;
  auto progress = [&](const Progress& p) {
    if (p.phase == "denoise" && p.step == 2) cancel = true;
    if (p.phase == "denoise") seen = p.step;
  };
  EXPECT_THROW(tiny().generate_batch({a, a}, progress, &cancel), Cancelled);
  EXPECT_EQ(seen, 2);
}
