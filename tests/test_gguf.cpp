// GGUF reading (tests/data/gguf, from the shared fixtures): every GGML type decodes as ComfyUI-GGUF's
// de-quantizer does, metadata reads, hostile files give clear errors, and the GGUF DiT runs through
// --diffusion-model as the diffusers pipeline did with the same values.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "golden.h"
#include "golden_cases.h"
#include "gguf_builder.h"
#include "io/checkpoint.h"
#include "io/gguf.h"
#include "core/ggml_types.h"
#include "io/model_folder.h"
#include "io/safetensors.h"
#include "ops/ops.h"

using namespace ernie;
using json = nlohmann::json;

namespace {

std::string gguf_dir() { return test::data_dir() + "/gguf"; }
const SafeTensorsFile& golden_gguf() {
  static std::shared_ptr<SafeTensorsFile> g = SafeTensorsFile::open(gguf_dir() + "/golden_gguf.safetensors");
  return *g;
}
json golden_json() {
  std::ifstream f(gguf_dir() + "/golden_gguf.json");
  return json::parse(f);
}

void write_all(const std::string& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary);
  out << s;
}

// The message opening `bytes` as a GGUF file gives ("" when it opens), checked to name the file.
std::string open_error(const std::string& bytes) {
  test::TempDir d;
  const std::string p = d.str() + "/x.gguf";
  write_all(p, bytes);
  const std::string msg = test::error_of([&] { GgufFile::open(p); });
  if (!msg.empty()) {
    EXPECT_NE(msg.find(p), std::string::npos) << "the message should name the file: " << msg;
  }
  return msg;
}
void expect_refused(const test::GgufSpec& s, const std::string& needle) {
  const std::string msg = open_error(test::build_gguf(s));
  EXPECT_NE(msg.find(needle), std::string::npos) << "expected '" << needle << "', got: '" << msg << "'";
}

// Max |a - b| over uint8 pixels, the golden float image quantized as numpy_to_pil does.
int max_pixel_diff(const std::vector<uint8_t>& rgb, const std::vector<float>& golden_hwc) {
  if (rgb.size() != golden_hwc.size()) return 256;
  int m = 0;
  for (size_t i = 0; i < rgb.size(); ++i)
    m = std::max(m, std::abs(int(rgb[i]) - int(std::nearbyint(golden_hwc[i] * 255.0f))));
  return m;
}

}  // namespace

TEST(Gguf, EveryTypeDecodesLikeTheReference) {
  auto f = GgufFile::open(gguf_dir() + "/blocks.gguf");
  EXPECT_STREQ(f->format(), "gguf");
  const json g = golden_json();  // kept alive: a range-for over a temporary's member dangles
  for (const auto& name : g["blocks"]) {
    const std::string type = name.get<std::string>();
    SCOPED_TRACE(type);
    const TensorInfo* ti = f->find("t." + type);
    ASSERT_TRUE(ti);
    ASSERT_GE(ti->ggml_type, 0);
    EXPECT_EQ(ggml_type(uint32_t(ti->ggml_type))->name, type);
    const Tensor got = f->tensor("t." + type), want = golden_gguf().tensor("blocks." + type);
    EXPECT_EQ(ti->shape, (Shape{4, 512}));
    EXPECT_TRUE(test::tensors_close(got, want, 1e-6));
    const std::vector<float> a = got.to_vector(), b = want.to_vector();
    ASSERT_EQ(a.size(), b.size());
    size_t differ = 0;
    for (size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], 4) != 0;
    EXPECT_EQ(differ, 0u) << "values not bit-identical";
  }
}

// The stored blocks (what a CUDA DiT keeps in memory) expand through ops::dequantize to the file's own decoding,
// bit for bit: the CPU twin of the GPU's de-quantizer (tests/gpu/test_cuda_gguf.cpp). Wrong geometry is an error.
TEST(Gguf, StoredBlocksExpandAsTheFileDecodes) {
  auto f = GgufFile::open(gguf_dir() + "/blocks.gguf");
  const json g = golden_json();
  for (const auto& name : g["blocks"]) {
    const std::string type = name.get<std::string>();
    SCOPED_TRACE(type);
    const TensorInfo* ti = f->find("t." + type);
    const Tensor raw = f->stored_blocks("t." + type);
    if (ggml_type(uint32_t(ti->ggml_type))->plain) {
      EXPECT_FALSE(raw.defined());
      continue;
    }
    ASSERT_TRUE(raw.defined());
    EXPECT_EQ(raw.dtype(), DType::U8);
    EXPECT_EQ(size_t(raw.nbytes()), ti->end - ti->begin);
    const ops::Weight w = ops::Weight::ggml_blocks(raw, ti->ggml_type, 512);
    EXPECT_EQ(w.shape(), (Shape{4, 512}));
    const Tensor got = ops::dequantize(w), want = f->tensor("t." + type);
    ASSERT_EQ(got.shape(), want.shape());
    EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0) << "values not bit-identical";
    const Tensor x = Tensor::from_vector(std::vector<float>(2 * 512, 0.5f), {2, 512});
    EXPECT_TRUE(test::tensors_close(ops::linear(x, w), ops::linear(x, want), 1e-6));
    test::expect_error([&] { ops::dequantize(ops::Weight::ggml_blocks(raw, ti->ggml_type, 256)); },
                       "do not hold rows of 256 elements");
  }
  test::expect_error([&] { ops::dequantize(ops::Weight::ggml_blocks(f->stored_blocks("t.Q8_0"), 16, 512)); },
                     "GGML type 16 is not a block type this build reads");
}

TEST(Gguf, PlainTypesAreViewsAndBlockTypesF32) {
  auto f = GgufFile::open(gguf_dir() + "/blocks.gguf");
  EXPECT_EQ(f->find("t.BF16")->dtype, DType::BF16);
  EXPECT_EQ(f->find("t.F16")->dtype, DType::F16);
  EXPECT_EQ(f->find("t.Q4_K")->dtype, DType::F32);
  EXPECT_EQ(f->find("t.Q4_K")->end - f->find("t.Q4_K")->begin, size_t(4 * 2 * 144));  // stored bytes
  const Tensor v = f->tensor("t.BF16");
  EXPECT_EQ(v.dtype(), DType::BF16);
  test::expect_error([&] { f->tensor("t.nope"); }, "no tensor named 't.nope'");
  EXPECT_STREQ(open_tensor_file(gguf_dir() + "/blocks.gguf")->format(), "gguf");
}

TEST(Gguf, TextEncoderMetadata) {
  auto f = GgufFile::open(gguf_dir() + "/text_encoder-F16.gguf");
  EXPECT_TRUE(f->version() == 2 || f->version() == 3);
  EXPECT_EQ(f->meta_string("general.architecture").value_or(""), "llama");
  const GgufValue* toks = f->meta("tokenizer.ggml.tokens");
  ASSERT_TRUE(toks);
  const std::vector<std::string> tokens = toks->strings("tokenizer.ggml.tokens");
  EXPECT_EQ(tokens.size(), 871u);
  EXPECT_FALSE(f->meta("no.such.key"));
  EXPECT_FALSE(f->meta_string("no.such.key"));
  // Some int hyper-parameter under llama.*, and typed access refusing the wrong type.
  const GgufValue* ctx = f->meta("llama.block_count");
  ASSERT_TRUE(ctx);
  EXPECT_EQ(ctx->integer("llama.block_count"), 3);
  test::expect_error([&] { toks->integer("tokenizer.ggml.tokens"); }, "an array of string, not an integer");
  test::expect_error([&] { f->meta("general.architecture")->strings("general.architecture"); },
                     "not an array of strings");
  EXPECT_TRUE(f->find("token_embd.weight"));
}

TEST(Gguf, SmallValidFileOpens) {
  test::GgufSpec s = test::small_gguf();
  EXPECT_EQ(open_error(test::build_gguf(s)), "");
  s.version = 2;
  EXPECT_EQ(open_error(test::build_gguf(s)), "");
  s.alignment = 64;
  s.tensors[1].offset = 64;
  s.data_bytes = 98;
  EXPECT_EQ(open_error(test::build_gguf(s)), "");
}

TEST(Gguf, EveryTruncationIsAClearError) {
  const std::string full = test::build_gguf(test::small_gguf());
  for (size_t n = 0; n < full.size(); ++n) {
    SCOPED_TRACE(n);
    const std::string msg = open_error(full.substr(0, n));
    EXPECT_FALSE(msg.empty());
    const bool named = msg.find("truncated") != std::string::npos || msg.find("not a GGUF file") != std::string::npos ||
                       msg.find("could hold") != std::string::npos;
    EXPECT_TRUE(named) << msg;
  }
}

TEST(Gguf, HostileHeadersAreRefused) {
  using test::GgufSpec;
  auto with = [](auto f) {
    GgufSpec s = test::small_gguf();
    f(s);
    return s;
  };
  expect_refused(with([](GgufSpec& s) { s.magic = "GGUG"; }), "not a GGUF file");
  expect_refused(with([](GgufSpec& s) { s.version = 1; }), "GGUF version 1");
  expect_refused(with([](GgufSpec& s) { s.version = 4; }), "unsupported GGUF version 4");
  expect_refused(with([](GgufSpec& s) { s.version = 0x03000000; }), "big-endian");
  expect_refused(with([](GgufSpec& s) { s.n_kv = uint64_t(1) << 60; }), "metadata entries, more than");
  expect_refused(with([](GgufSpec& s) { s.n_tensors = ~uint64_t(0); }), "tensors, more than");
  expect_refused(with([](GgufSpec& s) { s.tensors[0].n_dims = 5; }), "has 5 dimensions");
  expect_refused(with([](GgufSpec& s) {
                   s.tensors[0].ne = {4, 2, 1, 1, 1};
                 }),
                 "has 5 dimensions");
  expect_refused(with([](GgufSpec& s) { s.tensors[0].n_dims = 0; }), "has 0 dimensions");
  expect_refused(with([](GgufSpec& s) { s.tensors[1].offset = 64; }), "runs past the end");
  expect_refused(with([](GgufSpec& s) { s.data_bytes = 65; }), "runs past the end");
  expect_refused(with([](GgufSpec& s) { s.tensors[1].offset = 33; }), "not a multiple of the 32-byte alignment");
  expect_refused(with([](GgufSpec& s) { s.tensors[1].type = 99; }), "tensor 'b' has unknown GGML type id 99");
  expect_refused(with([](GgufSpec& s) { s.tensors[1].type = 16; }), "GGML type IQ2_XXS (id 16), which this build");
  expect_refused(with([](GgufSpec& s) { s.tensors[1].name = "a"; }), "tensor 'a' appears twice");
  expect_refused(with([](GgufSpec& s) { s.strings.push_back(s.strings[0]); }), "'general.architecture' appears twice");
  expect_refused(with([](GgufSpec& s) { s.tensors[1].ne = {31, 1}; }), "row length 31 is not a multiple");
  expect_refused(with([](GgufSpec& s) { s.tensors[0].ne = {uint64_t(1) << 62, 8}; }), "overflows");
  expect_refused(with([](GgufSpec& s) { s.tensors[0].ne = {~uint64_t(0), 1}; }), "negative or corrupt");
  // An empty tensor whose other dimensions' product overflows (found by fuzzing: shape_numel overflowed).
  expect_refused(with([](GgufSpec& s) { s.tensors[0].ne = {0, uint64_t(1) << 40, uint64_t(1) << 40}; }), "overflows");
  expect_refused(with([](GgufSpec& s) { s.tensors[1].offset = 0; }), "overlap");
  expect_refused(with([](GgufSpec& s) { s.alignment = 24; }), "not a power of two");
  expect_refused(with([](GgufSpec& s) { s.alignment = 0; }), "not a power of two");
  expect_refused(with([](GgufSpec& s) { s.tensors[1].offset = ~uint64_t(0) - 31; }), "");
  // A string length far past the end.
  std::string b = test::build_gguf(test::small_gguf());
  b[24] = '\xff';  // the first key's length, byte 0 of 8 (header: magic, version, two counts: 24 bytes)
  b[31] = '\x7f';
  EXPECT_NE(open_error(b).find("truncated or corrupt GGUF: the key of metadata entry 0"), std::string::npos)
      << open_error(b);
  // Unknown value type and an array claiming too much.
  test::GgufBytes o;
  o.b = "GGUF";
  o.u32(3), o.u64(0), o.u64(1), o.str("k"), o.u32(13), o.u64(0);
  EXPECT_NE(open_error(o.b).find("metadata 'k' has unknown value type 13"), std::string::npos) << open_error(o.b);
  o.b = "GGUF";
  o.u32(3), o.u64(0), o.u64(1), o.str("k"), o.u32(9), o.u32(8), o.u64(uint64_t(1) << 40), o.u64(0);
  EXPECT_NE(open_error(o.b).find("claims 1099511627776 strings"), std::string::npos) << open_error(o.b);
  o.b = "GGUF";
  o.u32(3), o.u64(0), o.u64(1), o.str("k"), o.u32(9), o.u32(9), o.u64(1), o.u64(0);
  EXPECT_NE(open_error(o.b).find("array of arrays"), std::string::npos) << open_error(o.b);
  o.b = "GGUF";
  o.u32(3), o.u64(0), o.u64(1), o.str("general.alignment"), o.u32(10), o.u64(32);
  EXPECT_NE(open_error(o.b).find("general.alignment is u64, not u32"), std::string::npos) << open_error(o.b);
}

TEST(Gguf, DecodesAtMisalignedOffsetsByCopying) {
  test::GgufSpec s = test::small_gguf();
  s.alignment = 1;
  s.tensors[0].offset = 1;   // F32 at an odd address: copied, not viewed
  s.tensors[1].offset = 33;
  s.data_bytes = 67;
  test::TempDir d;
  const std::string p = d.str() + "/x.gguf";
  write_all(p, test::build_gguf(s));
  auto f = GgufFile::open(p);
  const Tensor a = f->tensor("a");
  EXPECT_EQ(a.shape(), (Shape{2, 4}));
  float want;
  const uint8_t bytes[4] = {1, 2, 3, 4};
  std::memcpy(&want, bytes, 4);
  EXPECT_EQ(a.f32()[0], want);
  EXPECT_EQ(f->tensor("b").shape(), (Shape{1, 32}));
}

// ---- the GGUF DiT through --diffusion-model ----------------------------------------------------------

class GgufDit : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufDit, MatchesTheReferenceRun) {
  const std::string variant = GetParam();
  const json g = golden_json();
  const std::string model = gguf_dir() + "/tiny256/model";
  EngineOptions o;
  o.device = "cpu";
  o.model = model;
  std::string prefix;
  if (variant != "folder") {
    o.files.diffusion_model = gguf_dir() + "/dit-" + variant + ".gguf";
    for (const auto& v : g["variants"])
      if (v["name"] == variant && v.contains("prefix")) prefix = v["prefix"].get<std::string>();
    const ModelFolder m = ModelFolder::open(model, false, o.files);
    EXPECT_EQ(m.transformer_c.prefix, prefix);
    EXPECT_EQ(test::fatal_problems(m), "");
  }
  const json& c = g["case"];
  GenerateRequest r = test::request_of_case(c);
  r.init_latents = golden_gguf().tensor("case.latents_init").clone();
  const GenerateResult res = Engine::open(o)->generate(r);
  const Tensor want_lat = golden_gguf().tensor(variant + ".latents_final");
  const Tensor want_img = golden_gguf().tensor(variant + ".image");
  auto lat = test::tensors_close(res.latents, want_lat, test::kCpuRelL2);
  auto img = test::tensors_close(res.image_f32, want_img, test::kCpuRelL2);
  EXPECT_TRUE(lat) << variant;
  EXPECT_TRUE(img) << variant;
  std::printf("%s: latents %s; image %s\n", variant.c_str(), lat.message(), img.message());
  ASSERT_EQ(res.images.size(), 1u);
  EXPECT_LE(max_pixel_diff(res.images[0].rgb, want_img.to_vector()), 1);
}

INSTANTIATE_TEST_SUITE_P(Gguf, GgufDit, ::testing::Values("folder", "Q8_0", "Q4_K", "Q5_1", "BF16"));

// LoRA on a GGUF DiT: its blocks are expanded to float at load, so an adapter merges as on a float model. With a
// diffusers-style adapter on two of tiny256's projections, the BF16 file (the folder's exact values) + LoRA gives
// the folder + LoRA run; the quantized files (random blocks, other weights: fixtures/README.md) are moved by it
// about as much as the folder is.
TEST(Gguf, LoraMergesIntoTheGgufDit) {
  const std::string model = gguf_dir() + "/tiny256/model";
  const ModelFolder folder = ModelFolder::open(model, false);
  test::TempDir dir;
  std::vector<std::pair<std::string, Tensor>> factors;
  uint64_t seed = 1;
  for (const char* w : {"layers.0.self_attention.to_q.weight", "layers.1.mlp.linear_fc2.weight"}) {
    const Shape sh = folder.transformer_c.tensor(w).shape();
    const std::string k = "transformer." + std::string(w).substr(0, std::strlen(w) - std::strlen(".weight"));
    factors.push_back({k + ".lora_A.weight", ops::scale(test::rnd({4, sh[1]}, seed++), 0.2f)});
    factors.push_back({k + ".lora_B.weight", ops::scale(test::rnd({sh[0], 4}, seed++), 0.2f)});
  }
  const std::string lora = dir.str() + "/gguf_lora.safetensors";
  save_safetensors(lora, factors);
  const json g = golden_json();
  const json& c = g["case"];
  auto run = [&](const std::string& variant, bool with_lora) {
    EngineOptions o;
    o.device = "cpu";
    o.model = model;
    if (variant != "folder") o.files.diffusion_model = gguf_dir() + "/dit-" + variant + ".gguf";
    GenerateRequest r = test::request_of_case(c);
    r.init_latents = golden_gguf().tensor("case.latents_init").clone();
    if (with_lora) {
      LoraRef l;
      l.path = lora;
      r.loras = {l};
    }
    return Engine::open(o)->generate(r).latents.to_vector();
  };
  const std::vector<float> base = run("folder", false), want = run("folder", true);
  const double effect = test::closeness(base, want).rel_l2;
  EXPECT_GT(effect, 1e-2);
  const double bf16_err = test::closeness(run("BF16", true), want).rel_l2;
  std::printf("BF16 + LoRA: rel L2 %.2g to the folder + LoRA (the adapter moves it %.4f)\n", bf16_err, effect);
  EXPECT_LT(bf16_err, test::kCpuRelL2);
  for (const char* v : {"Q8_0", "Q4_K"}) {
    const double moved = test::closeness(run(v, false), run(v, true)).rel_l2;
    std::printf("%s: the adapter moves it %.4f\n", v, moved);
    EXPECT_GT(moved, effect / 4) << v;
    EXPECT_LT(moved, effect * 4) << v;
  }
}

TEST(Gguf, ANonDitGgufIsNamed) {
  ComponentFiles f;
  f.diffusion_model = gguf_dir() + "/text_encoder-F16.gguf";
  test::expect_error([&] { ModelFolder::open(gguf_dir() + "/tiny256/model", false, f); },
                     "not an ERNIE-Image diffusion model (no 'x_embedder.proj.weight'");
  f.diffusion_model = gguf_dir() + "/dit-Q8_0.gguf";  // a 256-wide DiT where the tiny model's is 64 wide
  const ModelFolder m = ModelFolder::open(test::tiny_model(), false, f);
  EXPECT_NE(test::fatal_problems(m).find("has shape"), std::string::npos) << test::fatal_problems(m);
}
