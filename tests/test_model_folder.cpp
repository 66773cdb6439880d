// The diffusers model folder: configs parse into validated structs, every tensor the configs imply is
// present with the right shape, and each kind of damage to a copy of the fixture gives a clear error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "golden.h"
#include "io/model_folder.h"

namespace fs = std::filesystem;
using namespace ernie;
using ernie::test::error_of;
using ernie::test::fatal_problems;
using ernie::test::TempDir;
using json = nlohmann::json;

namespace {

std::string copy_fixture(const TempDir& d) {
  std::string dst = d.str() + "/model";
  fs::copy(test::tiny_model(), dst, fs::copy_options::recursive);
  for (auto& e : fs::recursive_directory_iterator(dst))
    fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add);
  return dst;
}

void edit_json(const std::string& path, const std::function<void(json&)>& f) {
  std::ifstream in(path);
  json j = json::parse(in);
  in.close();
  f(j);
  std::ofstream(path) << j.dump(2);
}

// Rewrites a component checkpoint with `edit` applied to its tensor list.
void rewrite_checkpoint(const std::string& file,
                        const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& edit) {
  std::vector<std::pair<std::string, Tensor>> ts;
  {
    auto f = SafeTensorsFile::open(file);
    for (const TensorInfo& ti : f->tensors()) ts.push_back({ti.name, f->tensor(ti.name).clone()});
  }
  edit(ts);
  save_safetensors(file, ts);
}

}  // namespace

TEST(ModelFolder, FixtureChecksOut) {
  ModelFolder m = ModelFolder::open(test::tiny_model());
  EXPECT_EQ(fatal_problems(m), "");
  EXPECT_EQ(m.dit.hidden_size, 64);
  EXPECT_EQ(m.dit.num_layers, 2);
  EXPECT_EQ(m.dit.head_dim(), 32);
  EXPECT_EQ(m.text_encoder.hidden_size, 48);
  EXPECT_EQ(m.text_encoder.num_hidden_layers, 3);
  EXPECT_EQ(m.text_encoder.head_dim, 12);
  EXPECT_EQ(m.text_encoder.rope_type, "yarn");
  EXPECT_EQ(m.vae.latent_channels, 8);
  EXPECT_EQ(m.vae.scale_factor(), 4);
  EXPECT_FLOAT_EQ(m.scheduler.shift, 4.0f);
  EXPECT_EQ(m.text_encoder_c.prefix, "language_model.model.");
  ASSERT_TRUE(m.pe.has_value());
  EXPECT_TRUE(m.pe->tie_word_embeddings);
  EXPECT_EQ(m.pe_c->prefix, "model.");
  EXPECT_FALSE(m.turbo);
  // Every spec'd tensor resolves, and the vision tower is reported as ignored, not as a problem.
  for (const TensorSpec& s : m.transformer_c.specs) EXPECT_EQ(m.transformer_c.tensor(s.name).shape(), s.shape) << s.name;
  bool vision_warned = false;
  for (const Problem& p : m.check())
    if (!p.fatal && p.component == "text_encoder" && p.message.find("ignored") != std::string::npos) vision_warned = true;
  EXPECT_TRUE(vision_warned);
  // Parameter counts follow the specs.
  size_t dit_params = 0;
  for (const TensorSpec& s : m.transformer_c.specs) dit_params += size_t(shape_numel(s.shape));
  EXPECT_EQ(m.transformer_c.params(), dit_params);
}

TEST(ModelFolder, ReleasedSizesMatchDesign) {
  // The defaults of the config structs are the released model's; the tensor lists they imply must give
  // the parameter counts DESIGN.md quotes (~8.0 B DiT, ~3.4 B text encoder).
  size_t dit = 0, te = 0;
  for (const TensorSpec& s : dit_tensor_specs(DitConfig{})) dit += size_t(shape_numel(s.shape));
  for (const TensorSpec& s : mistral_tensor_specs(MistralConfig{}, false)) te += size_t(shape_numel(s.shape));
  EXPECT_NEAR(double(dit) / 1e9, 8.0, 0.15);
  EXPECT_NEAR(double(te) / 1e9, 3.43, 0.05);
}

TEST(ModelFolder, TensorWithWrongShape) {
  TempDir d;
  std::string m = copy_fixture(d);
  rewrite_checkpoint(m + "/transformer/diffusion_pytorch_model.safetensors", [](auto& ts) {
    for (auto& [n, t] : ts)
      if (n == "layers.1.mlp.up_proj.weight") t = Tensor::zeros({160, 63}, DType::BF16);
  });
  std::string p = fatal_problems(ModelFolder::open(m));
  EXPECT_NE(p.find("layers.1.mlp.up_proj.weight' has shape [160, 63], the config implies [160, 64]"), std::string::npos) << p;
}

TEST(ModelFolder, MissingTensor) {
  TempDir d;
  std::string m = copy_fixture(d);
  rewrite_checkpoint(m + "/vae/diffusion_pytorch_model.safetensors", [](auto& ts) {
    std::erase_if(ts, [](auto& p) { return p.first == "decoder.conv_out.weight"; });
  });
  ModelFolder mf = ModelFolder::open(m);
  std::string p = fatal_problems(mf);
  EXPECT_NE(p.find("vae: missing tensor 'decoder.conv_out.weight' [3, 32, 3, 3]"), std::string::npos) << p;
  EXPECT_NE(error_of([&] { mf.require_ok("vae"); }).find("decoder.conv_out.weight"), std::string::npos);
  EXPECT_EQ(error_of([&] { mf.require_ok("transformer"); }), "");
}

TEST(ModelFolder, ConfigFieldWithWrongType) {
  TempDir d;
  std::string m = copy_fixture(d);
  edit_json(m + "/transformer/config.json", [](json& j) { j["num_attention_heads"] = "two"; });
  std::string e = error_of([&] { ModelFolder::open(m); });
  EXPECT_NE(e.find("transformer/config.json: field 'num_attention_heads' has the wrong type"), std::string::npos) << e;
}

TEST(ModelFolder, ConfigInconsistent) {
  TempDir d;
  std::string m = copy_fixture(d);
  edit_json(m + "/transformer/config.json", [](json& j) { j["num_attention_heads"] = 3; });
  std::string e = error_of([&] { ModelFolder::open(m); });
  EXPECT_NE(e.find("hidden_size 64 is not divisible by num_attention_heads 3"), std::string::npos) << e;

  edit_json(m + "/transformer/config.json", [](json& j) {
    j["num_attention_heads"] = 2;
    j["rope_axes_dim"] = {8, 12, 10};
  });
  e = error_of([&] { ModelFolder::open(m); });
  EXPECT_NE(e.find("rope_axes_dim sums to 30 but the head dim is 32"), std::string::npos) << e;

  edit_json(m + "/transformer/config.json", [](json& j) {
    j["rope_axes_dim"] = {8, 12, 12};
    j["text_in_dim"] = 40;
  });
  std::string p = fatal_problems(ModelFolder::open(m));
  EXPECT_NE(p.find("text_in_dim 40 != text encoder hidden_size 48"), std::string::npos) << p;
}

TEST(ModelFolder, InChannelsMustMatchVae) {
  TempDir d;
  std::string m = copy_fixture(d);
  edit_json(m + "/vae/config.json", [](json& j) { j["latent_channels"] = 16; });
  std::string p = fatal_problems(ModelFolder::open(m));
  EXPECT_NE(p.find("in_channels 32 != 4 x vae latent_channels 16"), std::string::npos) << p;
}

TEST(ModelFolder, MissingComponentFolder) {
  TempDir d;
  std::string m = copy_fixture(d);
  fs::remove_all(m + "/vae");
  std::string e = error_of([&] { ModelFolder::open(m); });
  EXPECT_NE(e.find("component folder 'vae' is missing"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { ModelFolder::open(d.str() + "/nope"); }).find("model folder not found"), std::string::npos);
}

TEST(ModelFolder, BadJson) {
  TempDir d;
  std::string m = copy_fixture(d);
  std::ofstream(m + "/scheduler/scheduler_config.json") << "{\"shift\": 4.0,";
  std::string e = error_of([&] { ModelFolder::open(m); });
  EXPECT_NE(e.find("scheduler_config.json: invalid JSON"), std::string::npos) << e;
}

TEST(ModelFolder, TextEncoderPrefixes) {
  for (std::string prefix : {"model.language_model.", "model."}) {
    TempDir d;
    std::string m = copy_fixture(d);
    rewrite_checkpoint(m + "/text_encoder/model.safetensors", [&](auto& ts) {
      for (auto& [n, t] : ts)
        if (n.rfind("language_model.model.", 0) == 0) n = prefix + n.substr(21);
    });
    ModelFolder mf = ModelFolder::open(m);
    EXPECT_EQ(mf.text_encoder_c.prefix, prefix);
    EXPECT_EQ(fatal_problems(mf), "") << prefix;
  }
}

TEST(ModelFolder, TurboDetection) {
  TempDir d;
  std::string m = copy_fixture(d);
  fs::rename(m, d.str() + "/ERNIE-Image-Turbo");
  EXPECT_TRUE(ModelFolder::open(d.str() + "/ERNIE-Image-Turbo").turbo);
}
