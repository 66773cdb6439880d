// Writing GGUF (convert -o x.gguf): the block encoders round-trip through the decoders ComfyUI-GGUF's values
// were checked against, and a converted DiT reads back with the names, types and layout the loaders expect and
// generates as the folder does (exactly for BF16, within each type's error otherwise).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/convert.h"
#include "engine/engine.h"
#include "golden.h"
#include "io/gguf.h"
#include "io/gguf_encode.h"
#include "io/gguf_quants.h"
#include "io/model_folder.h"
#include "io/safetensors.h"

using namespace ernie;

namespace {
std::string tiny256() { return test::data_dir() + "/gguf/tiny256/model"; }

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += double(a[i] - b[i]) * (a[i] - b[i]), den += double(b[i]) * b[i];
  return std::sqrt(num / den);
}

GenerateResult run(const std::string& dit) {
  EngineOptions o;
  o.device = "cpu";
  o.model = tiny256();
  if (!dit.empty()) o.files.diffusion_model = dit;
  GenerateRequest r;
  r.prompt = "a red fox";
  r.width = r.height = 64;
  r.steps = 2;
  r.seed = 7;
  return Engine::open(o)->generate(r);
}
}  // namespace

// Gaussian rows with an outlier per row, as weights have: each type's round trip within its error, finer types
// closer; and a row of zeros stays zeros.
TEST(GgufWrite, EncodersRoundTripThroughTheDecoders) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.f, 0.02f);
  const int64_t n = 8 * 256;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = normal(rng) + (i % 512 == 77 ? 0.3f : 0.f);
  double last = 1.0;
  for (const char* name : {"q4_k", "q5_k", "q6_k", "q8_0"}) {
    SCOPED_TRACE(name);
    const int id = ggml_output_type(name);
    const GgmlType& t = *ggml_type(uint32_t(id));
    std::vector<uint8_t> blocks(size_t(n / t.block) * t.block_bytes);
    ggml_encode(id, x.data(), n, blocks.data());
    std::vector<float> back(n);
    ggml_decode(t, blocks.data(), back.data(), n);
    const double err = rel_l2(back, x);
    std::printf("%s: round trip rel L2 %.4g\n", name, err);
    EXPECT_LT(err, 0.12);
    EXPECT_LT(err, last);  // each finer type is closer
    last = err;
    std::vector<float> zeros(256, 0.f), z(256, 1.f);
    std::vector<uint8_t> zb(t.block_bytes * size_t(256 / t.block));
    ggml_encode(id, zeros.data(), 256, zb.data());
    ggml_decode(t, zb.data(), z.data(), 256);
    for (float v : z) ASSERT_EQ(v, 0.f);
  }
  EXPECT_LT(last, 0.01);  // Q8_0
  test::expect_error([&] { std::vector<uint8_t> b(1000); ggml_encode(12, x.data(), 100, b.data()); },
                     "100 values are not whole blocks of 256");
  EXPECT_EQ(ggml_output_type("q3_k"), -1);
}

// Any GGUF to safetensors: every tensor de-quantized to F32 under its own name and torch-order shape, the
// values those of ComfyUI-GGUF's de-quantizer (the fixture's blocks.<TYPE>).
TEST(GgufWrite, AnyGgufBecomesF32Safetensors) {
  test::TempDir d;
  const std::string in = test::data_dir() + "/gguf/blocks.gguf", out = d.str() + "/blocks.safetensors";
  const ConvertStats st = convert_gguf_tensors(in, out, DType::F32);
  auto src = GgufFile::open(in);
  auto dst = SafeTensorsFile::open(out);
  auto golden = SafeTensorsFile::open(test::data_dir() + "/gguf/golden_gguf.safetensors");
  EXPECT_EQ(st.tensors, src->tensors().size());
  EXPECT_GE(st.ggml, 12u);
  for (const TensorInfo& ti : src->tensors()) {
    SCOPED_TRACE(ti.name);
    const TensorInfo* o = dst->find(ti.name);
    ASSERT_TRUE(o);
    EXPECT_EQ(o->shape, ti.shape);
    EXPECT_EQ(o->dtype, DType::F32);
    const std::string ref = "blocks." + ti.name.substr(2);  // t.<TYPE>
    if (golden->find(ref)) { EXPECT_TRUE(test::tensors_close(dst->tensor(ti.name), golden->tensor(ref), 1e-6)); }
  }
  test::expect_error([&] { convert_gguf_tensors(in, in, DType::F32); }, "is the input file itself");
}

TEST(GgufWrite, ConvertedDitReadsBackAndGenerates) {
  test::TempDir d;
  const ModelFolder m = ModelFolder::open(tiny256(), false);
  QuantPolicy all;
  all.keep_first_last_dit_blocks = false;
  const GenerateResult folder = run("");
  for (const char* name : {"bf16", "q8_0", "q4_k"}) {
    SCOPED_TRACE(name);
    const std::string out = d.str() + "/dit-" + name + ".gguf";
    const int id = ggml_output_type(name);
    const ConvertStats st = convert_dit_gguf(m, out, id, all);
    auto f = GgufFile::open(out);
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->meta_string("general.architecture"), "ernie_image");
    EXPECT_EQ(f->tensors().size(), st.tensors);
    size_t of_type = 0;
    for (const TensorInfo& ti : f->tensors()) {
      const TensorInfo* src = m.transformer_c.ckpt.find(m.transformer_c.stored_name(ti.name));
      ASSERT_TRUE(src) << ti.name << " is not a diffusers name of the DiT";
      EXPECT_EQ(ti.shape, src->shape) << ti.name;
      EXPECT_EQ(ti.begin % 32, 0u) << ti.name;
      of_type += ti.ggml_type == id;
      if (ti.shape.size() == 1) { EXPECT_EQ(ti.ggml_type, 0) << ti.name << ": 1-D tensors stay F32"; }
    }
    EXPECT_GE(of_type, 14u);  // every block linear of the 2 layers (and the other 2-D weights for bf16)
    const GenerateResult r = run(out);
    const double err = rel_l2(r.latents.to_vector(), folder.latents.to_vector());
    std::printf("%s: %zu tensors, %zu bytes; final latents rel L2 %.3g against the folder\n", name, st.tensors,
                st.bytes, err);
    if (std::string(name) == "bf16") EXPECT_EQ(err, 0.0) << "the folder's own bf16 values";
    else EXPECT_LT(err, std::string(name) == "q8_0" ? 0.005 : 0.05);
  }
  test::expect_error([&] { convert_dit_gguf(m, d.str() + "/x.gguf", 16, all); }, "no GGUF output type 16");
  const std::string shard = m.transformer_c.ckpt.files()[0]->path();
  test::expect_error([&] { convert_dit_gguf(m, shard, 8, all); }, "resolves to the model's own input file");
}
