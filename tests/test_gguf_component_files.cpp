// A llama.cpp LLM GGUF as --text-encoder (alias --llm) and as --tokenizer: the tiny model's text encoder as
// text_encoder-F16.gguf holds the folder's exact values, so every run below is bit-identical to the folder's.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "golden.h"
#include "golden_cases.h"
#include "io/model_folder.h"

using namespace ernie;

namespace {

std::string te_gguf() { return test::data_dir() + "/gguf/text_encoder-F16.gguf"; }

GenerateResult run(const std::string& model, const ComponentFiles& files) {
  EngineOptions o;
  o.device = "cpu";
  o.model = model;
  o.files = files;
  GenerateRequest r = test::golden_case(0);
  r.steps = 2;
  return Engine::open(o)->generate(r);
}

void expect_same(const GenerateResult& a, const GenerateResult& b, const char* what) {
  ASSERT_EQ(a.latents.shape(), b.latents.shape()) << what;
  EXPECT_EQ(a.latents.to_vector(), b.latents.to_vector()) << what;
  EXPECT_EQ(a.images[0].rgb, b.images[0].rgb) << what;
}

}  // namespace

TEST(GgufComponentFiles, LlmGgufTextEncoderAndTokenizerAreBitIdenticalToTheFolder) {
  const std::string m = test::tiny_model();
  const GenerateResult folder = run(m, {});

  ComponentFiles te;
  te.text_encoder = te_gguf();
  const ModelFolder mf = ModelFolder::open(m, false, te);
  EXPECT_EQ(mf.text_encoder_c.layout, "llama.cpp");
  EXPECT_EQ(test::fatal_problems(mf), "");
  expect_same(run(m, te), folder, "--text-encoder F.gguf with --model");

  ComponentFiles tok;
  tok.tokenizer = te_gguf();
  expect_same(run(m, tok), folder, "--tokenizer F.gguf with --model");

  // Without --model: the GGUF gives the text encoder's config and, unasked, the tokenizer.
  ComponentFiles all;
  all.diffusion_model = m + "/transformer/diffusion_pytorch_model.safetensors";
  all.vae = m + "/vae/diffusion_pytorch_model.safetensors";
  all.text_encoder = te_gguf();
  expect_same(run("", all), folder, "no --model, the tokenizer from the text encoder's GGUF");
}

TEST(GgufComponentFiles, WrongGgufFilesAreNamed) {
  ComponentFiles f;
  f.text_encoder = test::data_dir() + "/gguf/dit-Q8_0.gguf";
  test::expect_error([&] { ModelFolder::open(test::tiny_model(), false, f); }, "diffusion model (DiT)");
  f = {};
  f.tokenizer = test::data_dir() + "/gguf/dit-Q8_0.gguf";
  test::expect_error([&] { ModelFolder::open(test::tiny_model(), false, f); }, "tokenizer.ggml");
}
