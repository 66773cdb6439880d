// Component files in other tools' layouts (--vae, --text-encoder, --tokenizer) and without --model: written here
// from the tiny folder's own tensors, renamed to the ComfyUI / LDM layouts, they give bit-identical results.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "ernie_image.h"
#include "convert/convert.h"
#include "engine/engine.h"
#include "golden.h"
#include "golden_cases.h"
#include "io/model_folder.h"
#include "io/safetensors.h"
#include "models/random_folder.h"

using namespace ernie;
namespace fs = std::filesystem;

namespace {

std::string tiny(const std::string& rel) { return test::tiny_model() + "/" + rel; }
const std::string kDit = "transformer/diffusion_pytorch_model.safetensors";
const std::string kTe = "text_encoder/model.safetensors";
const std::string kVae = "vae/diffusion_pytorch_model.safetensors";
const std::string kTok = "tokenizer/tokenizer.json";

// The diffusers -> LDM/BFL VAE names, written out independently of io/key_layouts (regexes over the 2-block tiny
// VAE, the facts of diffusers' scripts/convert_flux2_to_diffusers.py), and the attention weights as 1x1 convs.
std::string ldm_name(const std::string& n) {
  static const std::vector<std::pair<std::regex, std::string>> rules = {
      {std::regex(R"(^quant_conv\.)"), "encoder.quant_conv."},
      {std::regex(R"(^post_quant_conv\.)"), "decoder.post_quant_conv."},
      {std::regex(R"(^encoder\.down_blocks\.(\d)\.resnets\.(\d)\.)"), "encoder.down.$1.block.$2."},
      {std::regex(R"(^encoder\.down_blocks\.(\d)\.downsamplers\.0\.)"), "encoder.down.$1.downsample."},
      {std::regex(R"(^decoder\.up_blocks\.0\.resnets\.(\d)\.)"), "decoder.up.1.block.$1."},  // reversed: 2 blocks
      {std::regex(R"(^decoder\.up_blocks\.1\.resnets\.(\d)\.)"), "decoder.up.0.block.$1."},
      {std::regex(R"(^decoder\.up_blocks\.0\.upsamplers\.0\.)"), "decoder.up.1.upsample."},
      {std::regex(R"(\.mid_block\.resnets\.0\.)"), ".mid.block_1."},
      {std::regex(R"(\.mid_block\.resnets\.1\.)"), ".mid.block_2."},
      {std::regex(R"(\.mid_block\.attentions\.0\.group_norm\.)"), ".mid.attn_1.norm."},
      {std::regex(R"(\.mid_block\.attentions\.0\.to_(q|k|v)\.)"), ".mid.attn_1.$1."},
      {std::regex(R"(\.mid_block\.attentions\.0\.to_out\.0\.)"), ".mid.attn_1.proj_out."},
      {std::regex(R"(\.conv_norm_out\.)"), ".norm_out."},
      {std::regex(R"(\.conv_shortcut\.)"), ".nin_shortcut."}};
  std::string s = n;
  for (const auto& [re, to] : rules) s = std::regex_replace(s, re, to);
  return s;
}

using Tensors = std::vector<std::pair<std::string, Tensor>>;

std::string save(const test::TempDir& d, const std::string& name, const Tensors& ts) {
  const std::string path = d.str() + "/" + name;
  save_safetensors(path, ts);
  return path;
}

std::string write_ldm_vae(const test::TempDir& d, const std::string& bad = "") {
  const Checkpoint ck = Checkpoint::open_file(tiny(kVae));
  Tensors ts;
  for (const TensorInfo* t : ck.tensors()) {
    Tensor x = ck.tensor(t->name);
    const std::string n = ldm_name(t->name);
    if (std::regex_search(n, std::regex(R"(mid\.attn_1\.(q|k|v|proj_out)\.weight$)")))
      x = x.reshape({x.dim(0), x.dim(1), 1, 1});
    if (n == bad) x = Tensor::zeros({x.dim(0), x.dim(1), 1, 1}, x.dtype());
    ts.push_back({n, x});
  }
  return save(d, bad.empty() ? "flux2_ae.safetensors" : "bad_ae.safetensors", ts);
}

// Comfy-Org's text_encoders layout: HF causal-LM names under "model.", an lm_head and a tekken_model tensor.
std::string write_hf_text_encoder(const test::TempDir& d, int64_t cut_hidden = 0) {
  const Checkpoint ck = Checkpoint::open_file(tiny(kTe));
  Tensors ts;
  const std::string p = "language_model.model.";
  for (const TensorInfo* t : ck.tensors()) {
    if (t->name.rfind(p, 0) != 0) continue;  // the vision tower and projector are not in these files
    Tensor x = ck.tensor(t->name);
    if (cut_hidden && t->name == p + "embed_tokens.weight") x = Tensor::zeros({x.dim(0), cut_hidden}, x.dtype());
    ts.push_back({"model." + t->name.substr(p.size()), x});
  }
  const Tensor e = ck.tensor(p + "embed_tokens.weight");
  ts.push_back({"lm_head.weight", e});
  ts.push_back({"tekken_model", Tensor::zeros({64}, DType::U8)});
  return save(d, cut_hidden ? "bad_te.safetensors" : "ministral-3-3b.safetensors", ts);
}

EngineOptions options(const std::string& model, const ComponentFiles& files) {
  EngineOptions o;
  o.device = "cpu";
  o.model = model;
  o.files = files;
  return o;
}

GenerateResult generate(const std::string& model, const ComponentFiles& files) {
  GenerateRequest r = test::golden_case(0);
  r.steps = 2;
  return Engine::open(options(model, files))->generate(r);
}

std::vector<float> encode(const std::string& model, const ComponentFiles& files) {
  EngineOptions o = options(model, files);
  o.load_denoiser = false;
  return Engine::open(o)->encode_prompt("a cat on a windowsill").to_vector();
}

void expect_same(const GenerateResult& a, const GenerateResult& b, const std::string& what) {
  ASSERT_EQ(a.latents.shape(), b.latents.shape()) << what;
  EXPECT_EQ(a.latents.to_vector(), b.latents.to_vector()) << what;
  ASSERT_EQ(a.images.size(), b.images.size()) << what;
  EXPECT_EQ(a.images[0].rgb, b.images[0].rgb) << what;
}

const GenerateResult& folder_result() {
  static const GenerateResult r = generate(test::tiny_model(), {});
  return r;
}

std::string warnings(const ModelFolder& m) {
  std::string s;
  for (const Problem& p : m.check())
    if (!p.fatal) s += p.component + ": " + p.message + "\n";
  return s;
}

}  // namespace

TEST(ComponentLayouts, TheTestsLdmNamesAreTheKnownOnes) {
  EXPECT_EQ(ldm_name("decoder.up_blocks.0.resnets.2.conv1.weight"), "decoder.up.1.block.2.conv1.weight");
  EXPECT_EQ(ldm_name("encoder.down_blocks.1.resnets.0.conv_shortcut.weight"),
            "encoder.down.1.block.0.nin_shortcut.weight");
  EXPECT_EQ(ldm_name("encoder.mid_block.attentions.0.to_out.0.weight"), "encoder.mid.attn_1.proj_out.weight");
  EXPECT_EQ(ldm_name("decoder.mid_block.resnets.1.norm2.bias"), "decoder.mid.block_2.norm2.bias");
  EXPECT_EQ(ldm_name("encoder.conv_norm_out.weight"), "encoder.norm_out.weight");
  EXPECT_EQ(ldm_name("quant_conv.weight"), "encoder.quant_conv.weight");
  EXPECT_EQ(ldm_name("bn.running_mean"), "bn.running_mean");
}

TEST(ComponentLayouts, VaeInTheLdmLayoutIsBitIdenticalToTheFolder) {
  test::TempDir d;
  ComponentFiles f;
  f.vae = write_ldm_vae(d);
  const ModelFolder m = ModelFolder::open(test::tiny_model(), false, f);
  EXPECT_EQ(m.vae_c.layout, "ldm");
  EXPECT_EQ(test::fatal_problems(m), "");
  EXPECT_EQ(m.vae_c.stored_name("decoder.up_blocks.0.resnets.0.conv1.weight"), "decoder.up.1.block.0.conv1.weight");
  EXPECT_EQ(m.vae_c.tensor("encoder.mid_block.attentions.0.to_q.weight").shape(), (Shape{64, 64}));
  expect_same(generate(test::tiny_model(), f), folder_result(), "--vae ldm");
}

TEST(ComponentLayouts, VaeInTheDiffusersLayoutIsBitIdenticalToTheFolder) {
  ComponentFiles f;
  f.vae = tiny(kVae);
  const ModelFolder m = ModelFolder::open(test::tiny_model(), false, f);
  EXPECT_EQ(m.vae_c.layout, "");
  EXPECT_EQ(m.vae_c.source, tiny(kVae));
  expect_same(generate(test::tiny_model(), f), folder_result(), "--vae diffusers");
}

TEST(ComponentLayouts, TextEncoderWithHfNamesIsBitIdenticalToTheFolder) {
  test::TempDir d;
  ComponentFiles f;
  f.text_encoder = write_hf_text_encoder(d);
  const ModelFolder m = ModelFolder::open(test::tiny_model(), false, f);
  EXPECT_EQ(m.text_encoder_c.prefix, "model.");
  EXPECT_EQ(test::fatal_problems(m), "");
  const std::string w = warnings(m);
  EXPECT_NE(w.find("'lm_head.weight'"), std::string::npos) << w;
  EXPECT_NE(w.find("'tekken_model'"), std::string::npos) << w;
  EXPECT_EQ(encode(test::tiny_model(), f), encode(test::tiny_model(), {}));
  expect_same(generate(test::tiny_model(), f), folder_result(), "--text-encoder hf");
  f.text_encoder = tiny(kTe);  // the diffusers text_encoder file itself
  EXPECT_EQ(ModelFolder::open(test::tiny_model(), false, f).text_encoder_c.prefix, "language_model.model.");
  EXPECT_EQ(encode(test::tiny_model(), f), encode(test::tiny_model(), {}));
}

TEST(ComponentLayouts, TokenizerFileIsBitIdenticalToTheFolder) {
  test::TempDir d;
  ComponentFiles f;
  f.tokenizer = tiny(kTok);
  EXPECT_EQ(encode(test::tiny_model(), f), encode(test::tiny_model(), {}));
  // Elsewhere, with its tokenizer_config.json beside it.
  fs::copy_file(tiny(kTok), d.path / "tokenizer.json");
  fs::copy_file(tiny("tokenizer/tokenizer_config.json"), d.path / "tokenizer_config.json");
  f.tokenizer = (d.path / "tokenizer.json").string();
  const ModelFolder m = ModelFolder::open(test::tiny_model(), false, f);
  EXPECT_EQ(m.read_file("tokenizer/tokenizer_config.json"),
            ModelFolder::open(test::tiny_model(), false).read_file("tokenizer/tokenizer_config.json"));
  expect_same(generate(test::tiny_model(), f), folder_result(), "--tokenizer");
}

TEST(ComponentLayouts, AllFourFilesWithoutModelReadTheConfigsOffTheShapes) {
  test::TempDir d;
  const ModelFolder folder = ModelFolder::open(test::tiny_model(), false);
  for (bool comfy : {false, true}) {
    ComponentFiles f;
    f.diffusion_model = tiny(kDit);
    f.text_encoder = comfy ? write_hf_text_encoder(d) : tiny(kTe);
    f.vae = comfy ? write_ldm_vae(d) : tiny(kVae);
    f.tokenizer = tiny(kTok);
    const ModelFolder m = ModelFolder::open("", false, f);
    EXPECT_TRUE(m.from_files);
    EXPECT_EQ(test::fatal_problems(m), "");
    EXPECT_EQ(dit_config_json(m.dit), dit_config_json(folder.dit));
    EXPECT_EQ(text_encoder_config_json(m.text_encoder), text_encoder_config_json(folder.text_encoder));
    EXPECT_EQ(vae_config_json(m.vae), vae_config_json(folder.vae));
    EXPECT_EQ(m.dit.eps, folder.dit.eps);
    EXPECT_EQ(m.text_encoder.head_dim, folder.text_encoder.head_dim);
    EXPECT_EQ(m.text_encoder.rms_norm_eps, folder.text_encoder.rms_norm_eps);
    EXPECT_EQ(m.text_encoder.llama_4_scaling_beta, folder.text_encoder.llama_4_scaling_beta);
    EXPECT_EQ(m.text_encoder.rope_truncate, folder.text_encoder.rope_truncate);
    EXPECT_EQ(m.text_encoder.pad_token_id, folder.text_encoder.pad_token_id);
    const SchedulerConfig &a = m.scheduler, &b = folder.scheduler;
    EXPECT_EQ(a.shift, b.shift);
    EXPECT_EQ(a.use_dynamic_shifting, b.use_dynamic_shifting);
    EXPECT_EQ(a.num_train_timesteps, b.num_train_timesteps);
    EXPECT_EQ(a.base_shift, b.base_shift);
    EXPECT_EQ(a.max_shift, b.max_shift);
    EXPECT_EQ(a.base_image_seq_len, b.base_image_seq_len);
    EXPECT_EQ(a.max_image_seq_len, b.max_image_seq_len);
    EXPECT_EQ(a.time_shift_type, b.time_shift_type);
    EXPECT_EQ(a.shift_terminal, b.shift_terminal);
    EXPECT_EQ(a.invert_sigmas, b.invert_sigmas);
    EXPECT_FALSE(m.turbo);
    EXPECT_EQ(encode("", f), encode(test::tiny_model(), {})) << "comfy " << comfy;
    expect_same(generate("", f), folder_result(), comfy ? "no --model, comfy layouts" : "no --model");
  }
}

TEST(ComponentLayouts, WrongFilesAreNamedByWhatTheyHold) {
  test::TempDir d;
  auto open_with = [&](ComponentFiles f) { return test::error_of([&] { ModelFolder::open(test::tiny_model(), false, f); }); };
  ComponentFiles f;
  f.vae = tiny(kDit);
  std::string e = open_with(f);
  EXPECT_NE(e.find("not a Flux2 VAE"), std::string::npos) << e;
  EXPECT_NE(e.find("looks like an ERNIE-Image DiT"), std::string::npos) << e;
  f = {};
  f.text_encoder = tiny(kVae);
  e = open_with(f);
  EXPECT_NE(e.find("not a text encoder"), std::string::npos) << e;
  EXPECT_NE(e.find("looks like a VAE"), std::string::npos) << e;
  f = {};
  f.diffusion_model = write_hf_text_encoder(d);
  e = open_with(f);
  EXPECT_NE(e.find("looks like a text encoder"), std::string::npos) << e;
  f = {};
  f.vae = save(d, "other.safetensors", {{"foo.weight", Tensor::zeros({2}, DType::F32)}});
  e = open_with(f);
  EXPECT_NE(e.find("encoder.down.0.block.0.conv1.weight"), std::string::npos) << e;  // what was looked for
  EXPECT_NE(e.find("'foo.weight'"), std::string::npos) << e;
  f = {};
  f.tokenizer = tiny(kVae);
  e = open_with(f);
  EXPECT_NE(e.find("not a tokenizer.json"), std::string::npos) << e;
  EXPECT_NE(e.find("safetensors"), std::string::npos) << e;
}

TEST(ComponentLayouts, ShapesThatDoNotMatchTheConfigNameTheTensor) {
  test::TempDir d;
  ComponentFiles f;
  f.vae = write_ldm_vae(d, "encoder.conv_in.weight");
  test::expect_error([&] { Engine::open(options(test::tiny_model(), f)); },
                     "tensor 'encoder.conv_in.weight' has shape [32, 3, 1, 1], the config implies [32, 3, 3, 3]");
  f = {};
  f.text_encoder = write_hf_text_encoder(d, 40);
  test::expect_error([&] { Engine::open(options(test::tiny_model(), f)); },
                     "tensor 'model.embed_tokens.weight' has shape [871, 40], the config implies [871, 48]");
  // Without --model the configs come from the files, so a mismatch between them is named across components.
  f.diffusion_model = tiny(kDit);
  f.vae = tiny(kVae);
  f.tokenizer = tiny(kTok);
  const std::string e = test::fatal_problems(ModelFolder::open("", false, f));
  EXPECT_NE(e.find("text_in_dim 48 != text encoder hidden_size 40"), std::string::npos) << e;
  EXPECT_FALSE(test::error_of([&] { Engine::open(options("", f)); }).empty());
}

TEST(ComponentLayouts, WithoutModelTheMissingFilesAreListed) {
  ComponentFiles f;
  f.diffusion_model = tiny(kDit);
  test::expect_error([&] { ModelFolder::open("", false, f); }, "missing: --text-encoder, --vae, --tokenizer");
  f = {};
  f.vae = tiny(kVae);
  f.text_encoder = tiny(kTe);
  test::expect_error([&] { Engine::open(options("", f)); }, "missing: --diffusion-model, --tokenizer");
  test::expect_error([&] { Engine::open(options("", {})); }, "--model: no model given");
}

TEST(ComponentLayouts, TheCApiTakesAllFourWithoutAModel) {
  test::TempDir d;
  const std::string vae = write_ldm_vae(d), te = write_hf_text_encoder(d), dit = tiny(kDit), tok = tiny(kTok);
  ernie_options o;
  ernie_options_init(&o);
  o.model_dir = nullptr;
  ernie_component_files files;
  ernie_component_files_init(&files);
  files.diffusion_model = dit.c_str();
  files.text_encoder = te.c_str();
  files.vae = vae.c_str();
  files.tokenizer = tok.c_str();
  ernie_model* m = nullptr;
  char* err = nullptr;
  ASSERT_EQ(ernie_load_components(&o, nullptr, &files, &m, &err), ERNIE_OK) << (err ? err : "");
  ernie_free(m);
  // The first version of the struct (diffusion_model only) is still read, with model_dir.
  const std::string dir = test::tiny_model();
  o.model_dir = dir.c_str();
  files.struct_size = offsetof(ernie_component_files, text_encoder);
  ASSERT_EQ(ernie_load_components(&o, nullptr, &files, &m, &err), ERNIE_OK) << (err ? err : "");
  ernie_free(m);
  o.model_dir = nullptr;
  files.struct_size = sizeof files;
  files.tokenizer = nullptr;
  EXPECT_NE(ernie_load_components(&o, nullptr, &files, &m, &err), ERNIE_OK);
  ASSERT_NE(err, nullptr);
  EXPECT_NE(std::string(err).find("missing: --tokenizer"), std::string::npos) << err;
  ernie_free_string(err);
}

TEST(ComponentLayouts, ConvertWritesComponentFilesWithoutModelAsTheFolderWouldBe) {
  test::TempDir d;
  ComponentFiles f;
  f.diffusion_model = tiny(kDit);
  f.text_encoder = write_hf_text_encoder(d);
  f.vae = write_ldm_vae(d);
  f.tokenizer = tiny(kTok);
  const std::string from_files = d.str() + "/files.safetensors", from_folder = d.str() + "/folder.safetensors";
  ConvertOptions co;
  co.include_pe = false;
  convert_model(ModelFolder::open("", false, f), from_files, co);
  convert_model(ModelFolder::open(test::tiny_model(), false), from_folder, co);
  const ModelFolder m = ModelFolder::open(from_files, false);
  EXPECT_EQ(test::fatal_problems(m), "");
  EXPECT_EQ(m.vae_c.tensor("decoder.mid_block.attentions.0.to_q.weight").shape(), (Shape{64, 64}));
  expect_same(generate(from_files, {}), generate(from_folder, {}), "converted from component files");
}
