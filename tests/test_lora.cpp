// LoRA against diffusers (tests/data/samplers-lora): the tiny diffusers-format adapter at scales 1.0 and 0.6
// (golden2 "lora.*.latents_final", CPU f32), the same tensors in the other four trainers' key styles, stacking,
// prompt tags, the A1111 hash, and every bad input the loader and the engine refuse.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/lora_library.h"
#include "engine/metadata.h"
#include "golden.h"
#include "golden2_cases.h"
#include "tiny_engine.h"
#include "io/lora_file.h"
#include "io/model_folder.h"
#include "io/safetensors.h"
#include "models/ernie_dit.h"
#include "models/lora_merge.h"
#include "models/quant_policy.h"
#include "ops/ops.h"

using namespace ernie;
namespace fs = std::filesystem;

namespace {

using test::golden2;
using test::lora_request;
using test::tiny_engine;
std::string tiny_lora() { return test::golden2_dir() + "/lora/tiny_lora.safetensors"; }
const DitConfig& tiny_dit() {
  static ModelFolder m = ModelFolder::open(test::tiny_model());
  return m.dit;
}

LoraRef lora_ref(const std::string& path, float scale = 1) {
  LoraRef r;
  r.path = path;
  r.scale = scale;
  return r;
}

// The tiny adapter's modules: target ("layers.0.mlp.up_proj") -> (A, B).
std::map<std::string, std::pair<Tensor, Tensor>> tiny_modules() {
  auto f = SafeTensorsFile::open(tiny_lora());
  std::map<std::string, std::pair<Tensor, Tensor>> m;
  const std::string pre = "transformer.";
  for (const TensorInfo& t : f->tensors()) {
    const std::string& n = t.name;
    const size_t a = n.rfind(".lora_A.weight"), b = n.rfind(".lora_B.weight");
    const size_t end = a != std::string::npos ? a : b;
    EXPECT_NE(end, std::string::npos) << n;
    const std::string mod = n.substr(pre.size(), end - pre.size());
    (a != std::string::npos ? m[mod].first : m[mod].second) = f->tensor(n).clone();
  }
  return m;
}

Tensor scalar(float v) { return Tensor::from_vector(std::vector<float>{v}, Shape{}); }
Tensor scaled(const Tensor& t, float s) {
  std::vector<float> v = t.to_vector();
  for (float& x : v) x *= s;
  return Tensor::from_vector(v, t.shape());
}

struct TempDir {
  fs::path p = fs::temp_directory_path() / ("ernie-lora-" + std::to_string(::getpid()) + "-" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
  TempDir() { fs::create_directories(p); }
  ~TempDir() { fs::remove_all(p); }
  std::string operator/(const std::string& f) const { return (p / f).string(); }
};

// The tiny adapter rewritten in `style`; alpha_factor scales alpha and divides B (the same delta) where the
// style stores an alpha.
std::string write_style(const TempDir& dir, const std::string& style, float alpha_factor = 1) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [mod, ab] : tiny_modules()) {
    const float rank = float(ab.first.shape()[0]);
    std::string under = mod;
    for (char& c : under) c = c == '.' ? '_' : c;
    const Tensor up = scaled(ab.second, 1 / alpha_factor);
    if (style == "peft") {
      out.emplace_back("base_model.model." + mod + ".lora_A.weight", ab.first);
      out.emplace_back("base_model.model." + mod + ".lora_B.weight", ab.second);
    } else if (style == "ai-toolkit") {
      out.emplace_back("diffusion_model." + mod + ".lora_A.weight", ab.first);
      out.emplace_back("diffusion_model." + mod + ".lora_B.weight", ab.second);
    } else if (style == "kohya") {
      out.emplace_back("lora_unet_" + under + ".lora_down.weight", ab.first);
      out.emplace_back("lora_unet_" + under + ".lora_up.weight", up);
      out.emplace_back("lora_unet_" + under + ".alpha", scalar(rank * alpha_factor));
    } else if (style == "onetrainer") {
      out.emplace_back("transformer." + mod + ".lora_down.weight", ab.first);
      out.emplace_back("transformer." + mod + ".lora_up.weight", up);
      out.emplace_back("transformer." + mod + ".alpha", scalar(rank * alpha_factor));
    } else if (style == "diffsynth") {
      out.emplace_back(mod + ".lora_A.default.weight", ab.first);
      out.emplace_back(mod + ".lora_B.default.weight", ab.second);
    } else {
      ADD_FAILURE() << style;
    }
  }
  const std::string path = dir / (style + ".safetensors");
  save_safetensors(path, out);
  return path;
}

std::string write_lora(const TempDir& dir, const std::string& name,
                       const std::vector<std::pair<std::string, Tensor>>& tensors) {
  const std::string path = dir / name;
  save_safetensors(path, tensors);
  return path;
}

void expect_final(const GenerateRequest& r, const std::string& golden, double tol = test::kCpuRelL2) {
  GenerateResult res = tiny_engine().generate(r);
  EXPECT_TRUE(test::tensors_close(res.latents, golden2().tensor(golden), tol));
}

}  // namespace

TEST(LoraGolden, WithoutAdapter) { expect_final(lora_request({}), "lora.none.latents_final"); }
TEST(LoraGolden, Scale1) { expect_final(lora_request({lora_ref(tiny_lora(), 1.0f)}), "lora.scale_1.0.latents_final"); }
TEST(LoraGolden, Scale06) { expect_final(lora_request({lora_ref(tiny_lora(), 0.6f)}), "lora.scale_0.6.latents_final"); }

TEST(LoraGolden, AdapterChangesTheResult) {  // the golden runs differ, so the tests above can fail
  const Tensor none = golden2().tensor("lora.none.latents_final");
  EXPECT_FALSE(test::tensors_close(golden2().tensor("lora.scale_1.0.latents_final"), none, 1e-3));
  EXPECT_FALSE(test::tensors_close(golden2().tensor("lora.scale_0.6.latents_final"), none, 1e-3));
}

TEST(LoraGolden, ScaleZeroIsTheBaseModel) {
  expect_final(lora_request({lora_ref(tiny_lora(), 0.f)}), "lora.none.latents_final");
}

TEST(LoraGolden, PromptTagIsTheFlag) {
  EngineOptions o;
  o.device = "cpu";
  o.default_offload = Offload::None;
  o.model = test::tiny_model();
  o.lora_dir = test::golden2_dir() + "/lora";
  auto e = Engine::open(o);
  GenerateRequest r = lora_request({});
  r.prompt += " <lora:tiny_lora:0.6>";
  GenerateResult res = e->generate(r);
  EXPECT_TRUE(test::tensors_close(res.latents, golden2().tensor("lora.scale_0.6.latents_final"), test::kCpuRelL2));
  EXPECT_EQ(res.revised_prompt, "a cat");
  ASSERT_EQ(res.resolved.loras.size(), 1u);
  EXPECT_EQ(res.resolved.loras[0].name, "tiny_lora");
  EXPECT_TRUE(res.resolved.loras[0].from_tag);
  EXPECT_FLOAT_EQ(res.resolved.loras[0].scale, 0.6f);
  // The metadata keeps the tag in the prompt (as A1111 does) and adds the adapter's short hash; the hash is
  // sha256 over the bytes after the header (computed once with Python's hashlib).
  const std::string params = a1111_parameters(image_meta(res, 0, "tiny", res.resolved.seed));
  EXPECT_NE(params.find("a cat <lora:tiny_lora:0.6>"), std::string::npos) << params;
  EXPECT_NE(params.find("Lora hashes: \"tiny_lora: f9267c2ae757\""), std::string::npos) << params;
  const nlohmann::json j = meta_json(image_meta(res, 0, "tiny", res.resolved.seed));
  ASSERT_TRUE(j.contains("loras")) << j.dump();
  EXPECT_EQ(j["loras"].at(0)["hash"], "f9267c2ae757");
  EXPECT_NEAR(j["loras"].at(0)["scale"].get<double>(), 0.6, 1e-6);
  EXPECT_EQ(fs::path(j["loras"].at(0)["file"].get<std::string>()).filename(), "tiny_lora.safetensors");
  // Listed, and an unknown name lists what is there.
  auto avail = e->available_loras();
  ASSERT_EQ(avail.size(), 1u);
  EXPECT_EQ(avail[0].name, "tiny_lora");
  GenerateRequest bad = lora_request({});
  bad.prompt += " <lora:nosuch:1>";
  try {
    e->generate(bad);
    ADD_FAILURE() << "an unknown LoRA name generated";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("nosuch"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("tiny_lora"), std::string::npos) << err.what();
  }
  for (const char* name : {"../lora/tiny_lora", "/etc/passwd", "..", "a\\b"}) {
    GenerateRequest r2 = lora_request({});
    LoraRef l;
    l.name = name;
    r2.loras = {l};
    EXPECT_THROW(e->generate(r2), Error) << name;
  }
  // The engine still serves the adapter, then the base model, after the errors.
  expect_final(lora_request({}), "lora.none.latents_final");
  res = e->generate(r);
  EXPECT_TRUE(test::tensors_close(res.latents, golden2().tensor("lora.scale_0.6.latents_final"), test::kCpuRelL2));
}

class LoraStyle : public ::testing::TestWithParam<std::string> {};

TEST_P(LoraStyle, SameResultAsDiffusers) {
  TempDir dir;
  const std::string path = write_style(dir, GetParam());
  const LoraAdapter a = load_lora(path, tiny_dit());
  EXPECT_EQ(a.style, GetParam() == "peft" ? "diffusers" : GetParam());
  EXPECT_EQ(a.weights.size(), 14u);
  EXPECT_TRUE(a.skipped.empty());
  expect_final(lora_request({lora_ref(path, 1.0f)}), "lora.scale_1.0.latents_final");
}

INSTANTIATE_TEST_SUITE_P(Tiny, LoraStyle,
                         ::testing::Values("peft", "ai-toolkit", "kohya", "onetrainer", "diffsynth"),
                         [](const auto& i) {
                           std::string n = i.param;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

TEST(Lora, AlphaScalesTheDelta) {  // alpha 2·rank with B halved is the same adapter
  TempDir dir;
  const std::string path = write_style(dir, "kohya", 2.f);
  expect_final(lora_request({lora_ref(path, 0.6f)}), "lora.scale_0.6.latents_final");
}

TEST(Lora, KohyaNamesWithUnderscoresMapBack) {  // linear_fc2 and to_out.0 in underscore form
  TempDir dir;
  const LoraAdapter a = load_lora(write_style(dir, "kohya"), tiny_dit());
  EXPECT_TRUE(a.weights.count("layers.1.mlp.linear_fc2.weight"));
  EXPECT_TRUE(a.weights.count("layers.0.self_attention.to_out.0.weight"));
  EXPECT_FLOAT_EQ(a.weights.at("layers.0.mlp.up_proj.weight").alpha, 4.f);
}

// Two adapters stacked are one adapter holding both: rank 4 + rank 2 = rank 6 with down [A1; A2], up [B1 B2].
TEST(Lora, StackedAdaptersAddUp) {
  TempDir dir;
  std::vector<std::pair<std::string, Tensor>> second, both;
  uint32_t seed = 1;
  for (const auto& [mod, ab] : tiny_modules()) {
    const int64_t in = ab.first.shape()[1], out = ab.second.shape()[0];
    Tensor a2 = test::rnd({2, in}, seed++, 0.5f), b2 = test::rnd({out, 2}, seed++, 0.5f);
    second.emplace_back("transformer." + mod + ".lora_A.weight", a2);
    second.emplace_back("transformer." + mod + ".lora_B.weight", b2);
    std::vector<float> a = ab.first.to_vector(), b;
    for (float x : a2.to_vector()) a.push_back(x);
    const std::vector<float> b1 = ab.second.to_vector(), b2v = b2.to_vector();
    for (int64_t o = 0; o < out; ++o) {
      for (int k = 0; k < 4; ++k) b.push_back(b1[size_t(o * 4 + k)]);
      for (int k = 0; k < 2; ++k) b.push_back(b2v[size_t(o * 2 + k)]);
    }
    both.emplace_back("transformer." + mod + ".lora_A.weight", Tensor::from_vector(a, {6, in}));
    both.emplace_back("transformer." + mod + ".lora_B.weight", Tensor::from_vector(b, {out, 6}));
  }
  const std::string p2 = write_lora(dir, "second.safetensors", second), pb = write_lora(dir, "both.safetensors", both);
  // The deltas themselves (alpha = rank for each file, so factor 1 everywhere), then whole runs.
  auto one = std::make_shared<const LoraAdapter>(load_lora(tiny_lora(), tiny_dit()));
  auto two = std::make_shared<const LoraAdapter>(load_lora(p2, tiny_dit()));
  auto sum = std::make_shared<const LoraAdapter>(load_lora(pb, tiny_dit()));
  const std::string w = "layers.1.self_attention.to_v.weight";
  Tensor stacked = lora_delta({{one, 1.f}, {two, 1.f}}, w, kCPU);
  Tensor merged = lora_delta({{sum, 1.f}}, w, kCPU);
  EXPECT_TRUE(test::tensors_close(stacked, merged, 1e-6));
  // A rank-6 alpha of 6 gives the single adapter factor 1; the rank-2 file's alpha 2: the same.
  GenerateResult a = tiny_engine().generate(lora_request({lora_ref(tiny_lora()), lora_ref(p2)}));
  GenerateResult b = tiny_engine().generate(lora_request({lora_ref(pb)}));
  EXPECT_TRUE(test::tensors_close(a.latents, b.latents, 1e-5));
  EXPECT_FALSE(test::tensors_close(a.latents, golden2().tensor("lora.scale_1.0.latents_final"), 1e-3));
}

TEST(Lora, DeltaIsScaleAlphaOverRankBA) {  // against a direct sum
  auto one = std::make_shared<const LoraAdapter>(load_lora(tiny_lora(), tiny_dit()));
  const LoraFactors& f = one->weights.at("layers.0.mlp.gate_proj.weight");
  Tensor d = lora_delta({{one, 0.5f}}, "layers.0.mlp.gate_proj.weight", kCPU);
  const int64_t out = f.up.shape()[0], in = f.down.shape()[1], r = f.rank;
  ASSERT_EQ(d.shape(), (Shape{out, in}));
  const std::vector<float> up = f.up.to_vector(), down = f.down.to_vector(), got = d.to_vector();
  std::vector<float> want(size_t(out * in));
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) {
      double s = 0;
      for (int64_t k = 0; k < r; ++k) s += double(up[size_t(o * r + k)]) * down[size_t(k * in + i)];
      want[size_t(o * in + i)] = float(0.5 * s);
    }
  EXPECT_LT(test::closeness(got, want).rel_l2, 1e-6);
  EXPECT_FALSE(lora_adapts({{one, 1.f}}, "layers.0.mlp.down_proj.weight"));
  EXPECT_TRUE(lora_adapts({{one, 1.f}}, "layers.0.mlp.up_proj.weight"));
}

// ---- bad input ----

void expect_load_error(const std::string& path, const std::string& needle) {
  try {
    load_lora(path, tiny_dit());
    ADD_FAILURE() << path << " loaded; want an error with '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(LoraBadInput, ShapesThatDoNotFit) {
  TempDir dir;
  const std::string m = "transformer.layers.0.mlp.up_proj";
  expect_load_error(write_lora(dir, "in.safetensors", {{m + ".lora_A.weight", test::rnd({4, 63}, 1)},
                                                       {m + ".lora_B.weight", test::rnd({160, 4}, 2)}}),
                    "do not fit the weight [160, 64]");
  expect_load_error(write_lora(dir, "out.safetensors", {{m + ".lora_A.weight", test::rnd({4, 64}, 1)},
                                                        {m + ".lora_B.weight", test::rnd({161, 4}, 2)}}),
                    "do not fit");
  expect_load_error(write_lora(dir, "rank.safetensors", {{m + ".lora_A.weight", test::rnd({4, 64}, 1)},
                                                         {m + ".lora_B.weight", test::rnd({160, 3}, 2)}}),
                    "up [160, rank]");
  expect_load_error(write_lora(dir, "half.safetensors", {{m + ".lora_A.weight", test::rnd({4, 64}, 1)}}), "no up (B)");
  expect_load_error(write_lora(dir, "alpha.safetensors", {{m + ".lora_down.weight", test::rnd({4, 64}, 1)},
                                                          {m + ".lora_up.weight", test::rnd({160, 4}, 2)},
                                                          {m + ".alpha", test::rnd({2}, 3)}}),
                    "must be one float");
}

TEST(LoraBadInput, UnknownModulesAndUnsupportedKinds) {
  TempDir dir;
  expect_load_error(write_lora(dir, "mod.safetensors",
                               {{"transformer.layers.9.mlp.up_proj.lora_A.weight", test::rnd({4, 64}, 1)},
                                {"transformer.layers.9.mlp.up_proj.lora_B.weight", test::rnd({160, 4}, 2)}}),
                    "layers.9");
  expect_load_error(write_lora(dir, "lokr.safetensors",
                               {{"lora_unet_layers_0_mlp_up_proj.lokr_w1", test::rnd({4, 4}, 1)},
                                {"lora_unet_layers_0_mlp_up_proj.lokr_w2", test::rnd({40, 16}, 2)}}),
                    "LoKr");
  expect_load_error(write_lora(dir, "loha.safetensors",
                               {{"lora_unet_layers_0_mlp_up_proj.hada_w1_a", test::rnd({160, 4}, 1)},
                                {"lora_unet_layers_0_mlp_up_proj.hada_w1_b", test::rnd({4, 64}, 2)}}),
                    "LoHa");
  expect_load_error(write_lora(dir, "dora.safetensors",
                               {{"transformer.layers.0.mlp.up_proj.lora_A.weight", test::rnd({4, 64}, 1)},
                                {"transformer.layers.0.mlp.up_proj.lora_B.weight", test::rnd({160, 4}, 2)},
                                {"transformer.layers.0.mlp.up_proj.lora_magnitude_vector", test::rnd({160}, 3)}}),
                    "DoRA");
  expect_load_error(write_lora(dir, "none.safetensors", {{"something.else", test::rnd({4}, 1)}}), "something.else is not part of a LoRA");
}

TEST(LoraBadInput, NonFiniteValues) {
  TempDir dir;
  Tensor a = test::rnd({4, 64}, 1);
  a.data<float>()[5] = std::nanf("");
  expect_load_error(write_lora(dir, "nan.safetensors", {{"transformer.layers.0.mlp.up_proj.lora_A.weight", a},
                                                        {"transformer.layers.0.mlp.up_proj.lora_B.weight",
                                                         test::rnd({160, 4}, 2)}}),
                    "non-finite");
}

TEST(LoraBadInput, TruncatedAndNotAFile) {
  TempDir dir;
  std::ifstream in(tiny_lora(), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t keep : {size_t(0), size_t(7), size_t(100), bytes.size() - 1}) {
    const std::string p = dir / ("cut" + std::to_string(keep) + ".safetensors");
    std::ofstream(p, std::ios::binary).write(bytes.data(), std::streamsize(keep));
    EXPECT_THROW(load_lora(p, tiny_dit()), Error) << keep;
  }
  EXPECT_THROW(load_lora(dir / "missing.safetensors", tiny_dit()), Error);
  EXPECT_THROW(load_lora(dir.p.string(), tiny_dit()), Error);
  // Through the engine: the error reaches the caller and the engine goes on.
  EXPECT_THROW(tiny_engine().generate(lora_request({lora_ref(dir / "missing.safetensors")})), Error);
}

TEST(LoraBadInput, Scales) {
  for (float s : {std::nanf(""), INFINITY, -INFINITY, 16.5f, -100.f, 1e30f})
    EXPECT_THROW(tiny_engine().generate(lora_request({lora_ref(tiny_lora(), s)})), Error) << s;
  EXPECT_NO_THROW(check_lora_scale(-16.f, "x"));
  EXPECT_NO_THROW(check_lora_scale(2.f, "x"));
}

TEST(LoraBadInput, TagsInTheNegativePrompt) {
  GenerateRequest r = lora_request({});
  r.negative_prompt = "blurry <lora:tiny_lora:1>";
  EXPECT_THROW(tiny_engine().generate(r), Error);
}

TEST(LoraBadInput, TagWithoutLibraryOrFileIsAnError) {  // never used as prompt text silently
  GenerateRequest r = lora_request({});
  r.prompt += " <lora:tiny_lora:1>";
  EXPECT_THROW(tiny_engine().generate(r), Error);
}

TEST(Lora, BatchesMustShareTheSet) {
  std::vector<GenerateRequest> two = {lora_request({lora_ref(tiny_lora())}), lora_request({})};
  EXPECT_THROW(tiny_engine().generate_batch(two), Error);
}

// ---- tags and flags ----

TEST(LoraTags, Strip) {
  std::vector<LoraRef> tags;
  EXPECT_EQ(strip_lora_tags("a cat <lora:x:0.8>", &tags), "a cat");
  ASSERT_EQ(tags.size(), 1u);
  EXPECT_EQ(tags[0].name, "x");
  EXPECT_FLOAT_EQ(tags[0].scale, 0.8f);
  EXPECT_TRUE(tags[0].from_tag);
  tags.clear();
  EXPECT_EQ(strip_lora_tags("<lora:a> a <lora:b:-0.5> dog <lora:c:1e-1>", &tags), "a dog");
  ASSERT_EQ(tags.size(), 3u);
  EXPECT_FLOAT_EQ(tags[0].scale, 1.f);
  EXPECT_FLOAT_EQ(tags[1].scale, -0.5f);
  EXPECT_FLOAT_EQ(tags[2].scale, 0.1f);
  EXPECT_EQ(strip_lora_tags("  no tags here  "), "  no tags here  ");  // untouched without a tag
  EXPECT_EQ(strip_lora_tags("x<lora:a>y"), "xy");
  EXPECT_EQ(strip_lora_tags("a <b> c"), "a <b> c");
  for (const char* bad : {"a <lora:x", "<lora:>", "<lora::1>", "<lora:x:1:2>", "<lora:x:abc>", "<lora:x:>"})
    EXPECT_THROW(strip_lora_tags(bad), Error) << bad;
}

TEST(LoraTags, Flag) {
  LoraRef a = parse_lora_flag("/x/y.safetensors:0.75");
  EXPECT_EQ(a.path, "/x/y.safetensors");
  EXPECT_FLOAT_EQ(a.scale, 0.75f);
  LoraRef b = parse_lora_flag("C:/loras/y.safetensors");  // a ':' not followed by a number is the path's
  EXPECT_EQ(b.path, "C:/loras/y.safetensors");
  EXPECT_FLOAT_EQ(b.scale, 1.f);
  EXPECT_EQ(parse_lora_flag("y.safetensors").path, "y.safetensors");
  EXPECT_FLOAT_EQ(parse_lora_flag("y.safetensors:-1").scale, -1.f);
  EXPECT_THROW(parse_lora_flag(""), Error);
}

TEST(LoraTags, HashIsTheAddnetHash) { EXPECT_EQ(lora_short_hash(tiny_lora()), "f9267c2ae757"); }

TEST(Lora, TextEncoderTensorsAreListedNotApplied) {
  TempDir dir;
  const std::string m = "lora_unet_layers_0_mlp_up_proj";
  const std::string p = write_lora(dir, "te.safetensors",
                                   {{m + ".lora_down.weight", test::rnd({2, 64}, 1)},
                                    {m + ".lora_up.weight", test::rnd({160, 2}, 2)},
                                    {"lora_te1_model_layers_0_self_attn_q_proj.lora_down.weight", test::rnd({2, 8}, 3)},
                                    {"lora_te1_model_layers_0_self_attn_q_proj.lora_up.weight", test::rnd({8, 2}, 4)},
                                    {"lora_te1_model_layers_0_self_attn_q_proj.alpha", scalar(2)}});
  const LoraAdapter a = load_lora(p, tiny_dit());
  EXPECT_EQ(a.style, "kohya");
  EXPECT_EQ(a.weights.size(), 1u);
  EXPECT_EQ(a.skipped.size(), 2u);
  LoraLibrary lib("", tiny_dit());
  const std::vector<LoraRef> r = lib.resolve({lora_ref(p)}, "");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].skipped, 2);
  EXPECT_EQ(r[0].name, "te");
  // Only a text encoder's: an error saying so.
  expect_load_error(write_lora(dir, "te_only.safetensors",
                               {{"lora_te1_x.lora_down.weight", test::rnd({2, 8}, 3)},
                                {"lora_te1_x.lora_up.weight", test::rnd({8, 2}, 4)}}),
                    "only adapts the text encoder");
}

// An 8-bit DiT (every block quantized) merges in F32, then quantizes: it lands near the f32 LoRA DiT, far from
// the base model (the adapter's change is well above the 8-bit rounding).
TEST(Lora, EightBitMergesBeforeQuantizing) {
  ModelFolder m = ModelFolder::open(test::tiny_model(), false);
  QuantPolicy all;
  all.keep_first_last_dit_blocks = false;
  const LoraSet set = {{std::make_shared<const LoraAdapter>(load_lora(tiny_lora(), m.dit)), 1.f}};
  const auto [x, text, t, lens] = test::dit_inputs();
  const std::vector<float> want =
      ErnieDit::load(m, kCPU, DType::F32, false, std::nullopt, all, set).forward(x, t, text, lens).to_vector();
  const std::vector<float> base = ErnieDit::load(m, kCPU, DType::F32).forward(x, t, text, lens).to_vector();
  const double lora_effect = test::closeness(base, want).rel_l2;
  EXPECT_GT(lora_effect, 1e-2);
  for (DType qt : {DType::F8_E4M3, DType::I8}) {
    const std::vector<float> got =
        ErnieDit::load(m, kCPU, DType::F32, false, qt, all, set).forward(x, t, text, lens).to_vector();
    const double err = test::closeness(got, want).rel_l2;
    std::printf("%s + LoRA: rel L2 %.4f to the f32 LoRA DiT (the adapter moves it %.4f)\n", dtype_name(qt), err,
                lora_effect);
    EXPECT_LT(err, lora_effect / 4) << dtype_name(qt);
  }
}

// --lora-apply-mode at_runtime: the 8-bit blocks keep their exact quantized base weights and add the adapter as a
// float side GEMM, so the result is off the f32 LoRA DiT by about the base model's own 8-bit error.
TEST(Lora, EightBitAtRuntimeAddsTheAdapterBesideTheBase) {
  ModelFolder m = ModelFolder::open(test::tiny_model(), false);
  QuantPolicy all;
  all.keep_first_last_dit_blocks = false;
  const LoraSet set = {{std::make_shared<const LoraAdapter>(load_lora(tiny_lora(), m.dit)), 1.f}};
  const test::DitInputs in = test::dit_inputs();
  auto run = [&](std::optional<DType> qt, const LoraSet& s, bool at_runtime) {
    const ErnieDit d = ErnieDit::load(m, kCPU, DType::F32, false, qt, all, s, at_runtime);
    return d.forward(in.x, in.t, in.text, in.text_lens).to_vector();
  };
  const std::vector<float> want = run(std::nullopt, set, false), base = run(std::nullopt, {}, false);
  const double lora_effect = test::closeness(base, want).rel_l2;
  for (DType qt : {DType::F8_E4M3, DType::I8}) {
    const double base_err = test::closeness(run(qt, {}, false), base).rel_l2;
    const double merged_err = test::closeness(run(qt, set, false), want).rel_l2;
    const double err = test::closeness(run(qt, set, true), want).rel_l2;
    std::printf("%s + LoRA at runtime: rel L2 %.4f to the f32 LoRA DiT (merged: %.4f; the 8-bit base model %.4f; "
                "the adapter moves it %.4f)\n", dtype_name(qt), err, merged_err, base_err, lora_effect);
    EXPECT_LT(err, lora_effect / 4) << dtype_name(qt);
    EXPECT_LT(err, 2 * base_err) << dtype_name(qt);
  }
  // Float weights merge in either mode.
  EXPECT_EQ(run(std::nullopt, set, true), want);
}

// q|k|v as one GEMM: the stacked side gives each part's own side output, and zeros for a part without one.
TEST(Lora, StackedSidesAreBlockDiagonal) {
  const LoraSide q{test::rnd({2, 6}, 1), test::rnd({4, 2}, 2)}, v{test::rnd({3, 6}, 3), test::rnd({5, 3}, 4)};
  const LoraSide qkv = stack_lora_sides({q, LoraSide{}, v}, {4, 3, 5}, kCPU, DType::F32);
  const Tensor x = test::rnd({7, 6}, 5);
  auto side = [&](const LoraSide& s) { return ops::linear(ops::linear(x, ops::Weight(s.down)), ops::Weight(s.up)); };
  const Tensor want = ops::concat({side(q), Tensor::zeros({7, 3}, DType::F32), side(v)}, 1);
  auto r = test::tensors_close(side(qkv), want, 1e-6);
  EXPECT_TRUE(r) << r.message();
}

// The engine's pinned copy of the stored weights reads each tensor from the file once, and a load through it
// equals a load from the file.
TEST(HostWeightCache, ReadsEachStoredTensorOnceAndLoadsTheSame) {
  int reads = 0;
  HostWeightCache cache(kCPU, size_t(1) << 30);
  auto stored = [&](const std::string& name) {
    ++reads;
    return ops::Weight(Tensor::from_vector({float(name.size())}, {1}));
  };
  EXPECT_EQ(cache.get("a.weight", stored).w.to_vector(), std::vector<float>{8});
  EXPECT_EQ(cache.get("a.weight", stored).w.to_vector(), std::vector<float>{8});
  cache.get("bb.weight", stored);
  EXPECT_EQ(reads, 2);
  ModelFolder m = ModelFolder::open(test::tiny_model(), false);
  const auto [x, text, t, lens] = test::dit_inputs();
  HostWeightCache through(kCPU, size_t(1) << 30);
  EXPECT_EQ(ErnieDit::load(m, kCPU, DType::F32, false, std::nullopt, {}, {}, false, &through).forward(x, t, text, lens).to_vector(),
            ErnieDit::load(m, kCPU, DType::F32).forward(x, t, text, lens).to_vector());
}

// Past its budget the cache passes the stored tensors through (read again each time), and says what it holds.
TEST(HostWeightCache, PastItsBudgetReadsTheFile) {
  int reads = 0;
  HostWeightCache cache(kCPU, 0);
  auto stored = [&](const std::string&) {
    ++reads;
    return ops::Weight(Tensor::from_vector({1.f, 2.f}, {2}));
  };
  EXPECT_EQ(cache.get("w", stored).w.to_vector(), (std::vector<float>{1, 2}));
  EXPECT_EQ(cache.get("w", stored).w.to_vector(), (std::vector<float>{1, 2}));
  EXPECT_EQ(reads, 2);
  EXPECT_EQ(cache.bytes(), size_t(0));
  EXPECT_GT(HostWeightCache::default_budget(), size_t(0));  // Linux: /proc/meminfo
}

// ---- issue 45: merges that overflow, non-decimal scales, stacked tags past the cap ----

TEST(LoraBadInput, MergeThatOverflowsIsAnError) {  // A = B = 1e38: finite factors, an infinite product
  auto a = std::make_shared<LoraAdapter>();
  a->path = "/loras/huge.safetensors";
  LoraFactors f;
  f.up = Tensor::from_vector(std::vector<float>(4, 1e38f), {4, 1});
  f.down = Tensor::from_vector(std::vector<float>(4, 1e38f), {1, 4});
  f.alpha = 1, f.rank = 1;
  a->weights["layers.0.mlp.up_proj.weight"] = f;
  const LoraSet set = {{a, 1.f}};
  try {
    merge_lora(Tensor::zeros({4, 4}, DType::F32), set, "layers.0.mlp.up_proj.weight", kCPU);
    ADD_FAILURE() << "an overflowing merge was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("huge.safetensors"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("layers.0.mlp.up_proj.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("non-finite"), std::string::npos) << e.what();
  }
  a->weights.begin()->second.up = Tensor::from_vector(std::vector<float>(4, 1e-3f), {4, 1});  // the same, finite
  a->weights.begin()->second.down = Tensor::from_vector(std::vector<float>(4, 1e-3f), {1, 4});
  EXPECT_NO_THROW(merge_lora(Tensor::zeros({4, 4}, DType::F32), set, "layers.0.mlp.up_proj.weight", kCPU));
}

// The same through the engine on the tiny model: an adapter file whose factors are all 1e38 fails the request,
// naming the file and the module, instead of giving a black image; the engine then runs the next request.
TEST(LoraBadInput, OverflowingAdapterFailsTheRequestNamingIt) {
  TempDir dir;
  const auto mods = tiny_modules();
  const auto& [mod, ab] = *mods.begin();
  auto huge = [](const Tensor& like) { return Tensor::from_vector(std::vector<float>(like.numel(), 1e38f), like.shape()); };
  const std::string path = write_lora(dir, "huge.safetensors", {{"transformer." + mod + ".lora_A.weight", huge(ab.first)},
                                                                 {"transformer." + mod + ".lora_B.weight", huge(ab.second)}});
  try {
    tiny_engine().generate(lora_request({lora_ref(path)}));
    ADD_FAILURE() << "an adapter that overflows when merged was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("huge.safetensors"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(mod + ".weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("non-finite"), std::string::npos) << e.what();
  }
  expect_final(lora_request({}), "lora.none.latents_final");
}

// Kept unmerged (--lora-apply-mode at_runtime), the product is made at every step: factors whose product can
// leave the float range are refused when the side is made, naming the LoRA and the module.
TEST(LoraBadInput, RuntimeSideThatOverflowsIsAnError) {
  auto a = std::make_shared<LoraAdapter>();
  a->path = "/loras/huge.safetensors";
  LoraFactors f;
  f.up = Tensor::from_vector(std::vector<float>(4, 1e38f), {4, 1});
  f.down = Tensor::from_vector(std::vector<float>(4, 1e38f), {1, 4});
  f.alpha = 1, f.rank = 1;
  a->weights["layers.0.mlp.up_proj.weight"] = f;
  const LoraSet set = {{a, 1.f}};
  try {
    lora_side(set, "layers.0.mlp.up_proj.weight", kCPU, DType::F32);
    ADD_FAILURE() << "an overflowing side was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("huge.safetensors"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("layers.0.mlp.up_proj.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("non-finite"), std::string::npos) << e.what();
  }
  a->weights.begin()->second.up = Tensor::from_vector(std::vector<float>(4, 1e19f), {4, 1});  // 1e38: in range
  a->weights.begin()->second.down = Tensor::from_vector(std::vector<float>(4, 1e19f), {1, 4});
  EXPECT_TRUE(lora_side(set, "layers.0.mlp.up_proj.weight", kCPU, DType::F32).defined());
}

TEST(LoraBadInput, ScalesAreDecimalOnly) {  // strtof would read 0x10 as 16, inf and nan as themselves
  for (const char* bad : {"y.safetensors:0x10", "y.safetensors:1e", "y.safetensors:inf", "y.safetensors:nan"})
    EXPECT_THROW(parse_lora_flag(bad), Error) << bad;
  for (const char* bad : {"<lora:x:0x10>", "<lora:x:inf>", "<lora:x:1e>", "<lora:x:.>"})
    EXPECT_THROW(strip_lora_tags(bad), Error) << bad;
  EXPECT_FLOAT_EQ(parse_lora_flag("y.safetensors:1.5e-1").scale, 0.15f);
  EXPECT_FLOAT_EQ(parse_lora_flag("y.safetensors:.5").scale, 0.5f);
  EXPECT_EQ(parse_lora_flag("C:/loras/y.safetensors").path, "C:/loras/y.safetensors");
}

TEST(LoraBadInput, StackedPastTheCap) {  // 64 tags or flags of 1 would merge at 64: the sum is what is capped
  GenerateRequest r = lora_request(std::vector<LoraRef>(17, lora_ref(tiny_lora(), 1.f)));
  try {
    tiny_engine().generate(r);
    ADD_FAILURE() << "17 stacked adapters of scale 1 were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("added up"), std::string::npos) << e.what();
  }
}
