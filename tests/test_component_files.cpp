// Component files (--diffusion-model ...): a component from a file of its own replaces the model's, and gives
// the same image as the folder when it holds the same values.
#include <gtest/gtest.h>

#include <cstdio>

#include "ernie_image.h"
#include "engine/engine.h"
#include "golden.h"
#include "golden_cases.h"
#include "io/model_folder.h"

using namespace ernie;

namespace {

// The tiny model's DiT written as one file with every name under `prefix` (ComfyUI's checkpoint layout).
std::string write_dit(const test::TempDir& d, const std::string& prefix) {
  const Checkpoint ck = Checkpoint::open_dir(test::tiny_model() + "/transformer");
  std::vector<std::pair<std::string, Tensor>> ts;
  for (const TensorInfo* t : ck.tensors()) ts.push_back({prefix + t->name, ck.tensor(t->name)});
  const std::string path = d.str() + "/dit.safetensors";
  save_safetensors(path, ts);
  return path;
}

GenerateResult run(const ComponentFiles& files) {
  EngineOptions o;
  o.device = "cpu";
  o.model = test::tiny_model();
  o.files = files;
  GenerateRequest r = test::golden_case(0);
  r.steps = 2;
  return Engine::open(o)->generate(r);
}

}  // namespace

TEST(ComponentFiles, DiffusionModelUnderComfyPrefixIsBitIdenticalToTheFolder) {
  test::TempDir d;
  const GenerateResult folder = run({});
  for (const char* prefix : {"", "model.diffusion_model."}) {
    ComponentFiles f;
    f.diffusion_model = write_dit(d, prefix);
    const ModelFolder m = ModelFolder::open(test::tiny_model(), false, f);
    EXPECT_EQ(m.transformer_c.prefix, prefix);
    EXPECT_EQ(test::fatal_problems(m), "");
    const GenerateResult r = run(f);
    ASSERT_EQ(r.latents.shape(), folder.latents.shape());
    EXPECT_EQ(r.latents.to_vector(), folder.latents.to_vector()) << "prefix '" << prefix << "'";
    EXPECT_EQ(r.images[0].rgb, folder.images[0].rgb);
  }
}

TEST(ComponentFiles, ANonDitFileIsNamed) {
  ComponentFiles f;
  f.diffusion_model = test::tiny_model() + "/vae/diffusion_pytorch_model.safetensors";
  test::expect_error([&] { ModelFolder::open(test::tiny_model(), false, f); },
                     "not an ERNIE-Image diffusion model (no 'x_embedder.proj.weight'");
  f.diffusion_model = test::tiny_model() + "/transformer/config.json";
  EXPECT_FALSE(test::error_of([&] { ModelFolder::open(test::tiny_model(), false, f); }).empty());
  test::TempDir d;
  f.diffusion_model = d.str() + "/dit.gguf";
  std::FILE* g = std::fopen(f.diffusion_model.c_str(), "wb");
  ASSERT_NE(g, nullptr);
  std::fputs("GGUF\3\0\0\0", g);
  std::fclose(g);
  test::expect_error([&] { ModelFolder::open(test::tiny_model(), false, f); }, "truncated or corrupt GGUF");
  f.diffusion_model = test::tiny_model() + "/no-such.safetensors";
  test::expect_error([&] { ModelFolder::open(test::tiny_model(), false, f); }, "no-such.safetensors");
}

TEST(ComponentFiles, TheCApiTakesThem) {
  test::TempDir d;
  const std::string dit = write_dit(d, "model.diffusion_model.");
  const std::string dir = test::tiny_model();
  ernie_options o;
  ernie_options_init(&o);
  o.model_dir = dir.c_str();
  ernie_component_files files;
  ernie_component_files_init(&files);
  files.diffusion_model = dit.c_str();
  ernie_model* m = nullptr;
  char* err = nullptr;
  ASSERT_EQ(ernie_load_components(&o, nullptr, &files, &m, &err), ERNIE_OK) << (err ? err : "");
  ernie_free(m);

  const std::string bad = dir + "/vae/diffusion_pytorch_model.safetensors";
  files.diffusion_model = bad.c_str();
  EXPECT_NE(ernie_load_components(&o, nullptr, &files, &m, &err), ERNIE_OK);
  ASSERT_NE(err, nullptr);
  EXPECT_NE(std::string(err).find("not an ERNIE-Image diffusion model"), std::string::npos) << err;
  ernie_free_string(err);

  files.struct_size = 3;
  err = nullptr;
  EXPECT_NE(ernie_load_components(&o, nullptr, &files, &m, &err), ERNIE_OK);
  ASSERT_NE(err, nullptr);
  EXPECT_NE(std::string(err).find("struct_size"), std::string::npos) << err;
  ernie_free_string(err);
}
