// The engine's hooks for bench (issue 40) and cold start (issue 42), on the CPU with the tiny model: each load's
// time and bytes, in open (resident) or in the generate that ran it (offloaded); prompt ids in place of a prompt;
// random weights of the model's configs, read from no checkpoint.
#include <gtest/gtest.h>

#include "core/error.h"
#include "engine/engine.h"
#include "golden.h"

using namespace ernie;

namespace {

EngineOptions tiny(const std::string& offload) {
  EngineOptions o;
  o.model = test::tiny_model();
  o.device = "cpu";
  o.offload = offload;
  o.sync_phases = true;
  return o;
}

GenerateRequest request() {
  GenerateRequest r;
  r.prompt = "a cat";
  r.width = r.height = 16;
  r.steps = 2;
  r.cfg = 2;
  r.seed = 3;
  return r;
}

}  // namespace

TEST(EngineTimings, ResidentLoadsAtOpenOffloadedInGenerate) {
  auto resident = Engine::open(tiny("none"));
  const LoadTimes& at_open = resident->info().loads;
  EXPECT_GT(at_open.text_encoder_s, 0);
  EXPECT_GT(at_open.denoiser_s, 0);
  EXPECT_GT(at_open.vae_s, 0);
  EXPECT_GT(at_open.text_encoder_bytes, 0u);
  EXPECT_GT(at_open.denoiser_bytes, 0u);
  EXPECT_GT(at_open.read_bytes, at_open.text_encoder_bytes / 2);  // stored bf16, placed f32
  EXPECT_EQ(at_open.cuda_init_s, 0);  // the CPU
  GenerateResult g = resident->generate(request());
  EXPECT_EQ(g.loads.total_s(), 0);  // nothing loaded again
  EXPECT_GT(g.denoise_s, 0);
  EXPECT_GE(g.denoise_s, g.denoise_enqueue_s);
  EXPECT_GT(g.postprocess_s, 0);
  EXPECT_LT(g.postprocess_s, g.decode_s);

  auto offloaded = Engine::open(tiny("text-encoder"));
  EXPECT_EQ(offloaded->info().loads.total_s(), 0);  // only the tokenizer at open
  GenerateResult first = offloaded->generate(request());
  EXPECT_GT(first.loads.text_encoder_s, 0);
  EXPECT_GT(first.loads.denoiser_s, 0);
  EXPECT_GT(first.loads.vae_s, 0);
  EXPECT_EQ(first.loads.read_bytes, at_open.read_bytes);  // the same tensors read
  GenerateResult second = offloaded->generate(request());
  EXPECT_GT(second.loads.text_encoder_s, 0);  // offloaded: loaded again for each request
  EXPECT_EQ(second.loads.denoiser_s, 0);      // resident since the first
  EXPECT_EQ(second.loads.vae_s, 0);
  EXPECT_EQ(second.latents.to_vector(), g.latents.to_vector());
}

TEST(EngineTimings, PromptIdsEncodeAsThePrompt) {
  auto e = Engine::open(tiny("none"));
  GenerateRequest by_text = request();
  GenerateRequest by_ids = request();
  by_ids.prompt = "recorded only";
  by_ids.prompt_ids = {1, 84, 240, 86, 84, 103};  // "a cat" with BOS (test_tokenize.sh)
  EXPECT_EQ(e->generate(by_ids).latents.to_vector(), e->generate(by_text).latents.to_vector());
  by_ids.prompt_ids.back() = e->info().text_vocab;
  EXPECT_THROW(e->resolve(by_ids), Error);
}

TEST(EngineTimings, RandomWeightsReadNoCheckpoint) {
  EngineOptions o = tiny("none");
  o.random_weights = true;
  auto random = Engine::open(o);
  EXPECT_EQ(random->info().loads.read_bytes, 0u);
  EXPECT_GT(random->info().loads.denoiser_bytes, 0u);
  auto stored = Engine::open(tiny("none"));
  const std::vector<float> a = random->generate(request()).latents.to_vector();
  const std::vector<float> b = stored->generate(request()).latents.to_vector();
  ASSERT_EQ(a.size(), b.size());
  EXPECT_NE(a, b);  // other weights, the same noise
  o.random_seed = 2;
  EXPECT_NE(Engine::open(o)->generate(request()).latents.to_vector(), a);
  // Released sizes (no model): only prompt ids, and a request to plan for.
  EngineOptions none;
  none.random_weights = true;
  none.device = "cpu";
  EXPECT_THROW(Engine::open(none), Error);
  none.files.vae = "x.safetensors";
  none.plan_for = request();
  EXPECT_THROW(Engine::open(none), Error);  // component files with random weights
}
