// Writing GGUF (convert -o x.gguf): the block encoders round-trip through the decoders ComfyUI-GGUF's values
// were checked against, and a converted DiT reads back with the names, types and layout the loaders expect and
// generates as the folder does (exactly for BF16, within each type's error otherwise).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "convert/convert.h"
#include "engine/engine.h"
#include "golden.h"
#include "io/gguf.h"
#include "io/gguf_encode.h"
#include "core/ggml_types.h"
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

// A minimal GGUF v3 reader of the test's own (not io/gguf.h), after the format's specification
// (ggml docs/gguf.md): the metadata's strings and integers, the tensor infos, where the data begins.
struct RawGguf {
  std::vector<uint8_t> bytes;
  std::map<std::string, std::string> strings;
  std::map<std::string, uint64_t> ints;
  struct Info {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
    uint64_t offset;
  };
  std::vector<Info> infos;
  size_t data = 0, alignment = 32;

  explicit RawGguf(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
    size_t at = 0;
    auto take = [&](size_t n) {
      if (at + n > bytes.size()) throw std::runtime_error("truncated at " + std::to_string(at));
      const uint8_t* p = bytes.data() + at;
      at += n;
      return p;
    };
    auto u32 = [&] { uint32_t v; std::memcpy(&v, take(4), 4); return v; };
    auto u64 = [&] { uint64_t v; std::memcpy(&v, take(8), 8); return v; };
    auto str = [&] { const uint64_t n = u64(); const uint8_t* p = take(n); return std::string(p, p + n); };
    if (std::string(reinterpret_cast<const char*>(take(4)), 4) != "GGUF") throw std::runtime_error("no magic");
    if (u32() != 3) throw std::runtime_error("not version 3");
    const uint64_t n_tensors = u64(), n_kv = u64();
    const size_t scalar[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};  // by GGUF value type; 8 string, 9 array
    for (uint64_t i = 0; i < n_kv; ++i) {
      const std::string key = str();
      const uint32_t type = u32();
      if (type == 8) strings[key] = str();
      else if (type == 4) ints[key] = u32();
      else if (type == 10) ints[key] = u64();
      else if (type == 9) {
        const uint32_t et = u32();
        const uint64_t n = u64();
        for (uint64_t j = 0; j < n; ++j) et == 8 ? (void)str() : (void)take(scalar[et]);
      } else if (type < 13) take(scalar[type]);
      else throw std::runtime_error(key + ": value type " + std::to_string(type));
    }
    for (uint64_t i = 0; i < n_tensors; ++i) {
      Info t;
      t.name = str();
      const uint32_t nd = u32();
      for (uint32_t d = 0; d < nd; ++d) t.ne.push_back(u64());
      t.type = u32();
      t.offset = u64();
      infos.push_back(t);
    }
    if (ints.count("general.alignment")) alignment = ints["general.alignment"];
    data = (at + alignment - 1) / alignment * alignment;
  }
  const Info* find(const std::string& name) const {
    for (const Info& t : infos)
      if (t.name == name) return &t;
    return nullptr;
  }
};

// IEEE half to float, for the Q8_0 scales.
float half_to_float(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const float v = e == 0 ? std::ldexp(float(m), -24) : std::ldexp(float(m | 1024), e - 25);
  return (h & 0x8000) ? -v : v;
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
  test::expect_error([&] { convert_gguf_tensors(in, in, DType::F32); }, "resolves to the input file");
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
    EXPECT_EQ(f->meta_string("general.architecture"), "wan");
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

// ComfyUI-GGUF's loader.py IMG_ARCH_LIST at city96/ComfyUI-GGUF 795e45156ece99afbc3efef911e63fcb46e6a20d: the
// architectures its UNet loader accepts ("Unexpected architecture type in GGUF file" otherwise).
const std::set<std::string> kComfyGgufImgArchs = {"flux", "sd1",  "sdxl", "sd3", "aura",    "hidream",
                                                  "cosmos", "ltxv", "hyvid", "wan", "lumina2", "qwen_image"};

// The written file as a reader of its own sees it: an architecture ComfyUI-GGUF accepts, every DiT tensor under
// its bare diffusers name and torch shape (x_embedder.proj.weight 4-D, F32), data aligned to 32 bytes,
// llama.cpp's file type, and the Q8_0 blocks decoding to the folder's values within half a quantization step.
TEST(GgufWrite, WrittenDitParsesWithAnIndependentReader) {
  test::TempDir d;
  const ModelFolder m = ModelFolder::open(tiny256(), false);
  QuantPolicy all;
  all.keep_first_last_dit_blocks = false;
  const std::string out = d.str() + "/dit-q8_0.gguf";
  convert_dit_gguf(m, out, ggml_output_type("q8_0"), all);
  const RawGguf g(out);
  ASSERT_TRUE(g.strings.count("general.architecture"));
  EXPECT_TRUE(kComfyGgufImgArchs.count(g.strings.at("general.architecture"))) << g.strings.at("general.architecture");
  EXPECT_EQ(g.ints.at("general.file_type"), 7u);  // LLAMA_FTYPE_MOSTLY_Q8_0
  EXPECT_EQ(g.ints.at("general.quantization_version"), 2u);
  EXPECT_EQ(g.data % 32, 0u);
  std::set<std::string> want;
  for (const TensorSpec& s : m.transformer_c.specs)
    if (m.transformer_c.ckpt.find(m.transformer_c.stored_name(s.name))) want.insert(s.name);
  std::set<std::string> got;
  size_t q8 = 0;
  for (const RawGguf::Info& t : g.infos) {
    SCOPED_TRACE(t.name);
    got.insert(t.name);
    EXPECT_EQ(t.offset % 32, 0u);
    const Tensor src = m.transformer_c.tensor(t.name).to_f32();
    Shape shape(t.ne.rbegin(), t.ne.rend());
    ASSERT_EQ(shape, src.shape());
    if (t.type != 8) continue;
    ++q8;
    const std::vector<float> x = src.to_vector();
    ASSERT_LE(g.data + t.offset + x.size() / 32 * 34, g.bytes.size());
    const uint8_t* b = g.bytes.data() + g.data + t.offset;
    double worst = 0;
    for (size_t blk = 0; blk < x.size() / 32; ++blk, b += 34) {
      uint16_t h;
      std::memcpy(&h, b, 2);
      const float scale = half_to_float(h);
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[blk * 32 + size_t(i)]));
      ASSERT_NEAR(scale, amax / 127, amax / 127 * 1e-3 + 6e-8) << "block " << blk;
      for (int i = 0; i < 32; ++i) {
        const float v = scale * float(int8_t(b[2 + i])), ref = x[blk * 32 + size_t(i)];
        ASSERT_LE(std::fabs(v - ref), 0.51f * scale + 1e-7f) << "block " << blk << " element " << i;
        worst = std::max(worst, double(std::fabs(v - ref)));
      }
    }
  }
  EXPECT_EQ(got, want);
  EXPECT_GE(q8, 14u);
  const RawGguf::Info* patch = g.find("x_embedder.proj.weight");
  ASSERT_TRUE(patch);
  EXPECT_EQ(patch->ne.size(), 4u);
  EXPECT_EQ(patch->type, 0u);  // F32
  // The model's own name, for the tools that want it; and a name that is no GGUF architecture refused.
  const std::string own = d.str() + "/dit-own.gguf";
  convert_dit_gguf(m, own, ggml_output_type("q4_k"), all, "ernie_image");
  const RawGguf o(own);
  EXPECT_EQ(o.strings.at("general.architecture"), "ernie_image");
  EXPECT_EQ(o.ints.at("general.file_type"), 15u);  // LLAMA_FTYPE_MOSTLY_Q4_K_M
  test::expect_error([&] { convert_dit_gguf(m, d.str() + "/x.gguf", 8, all, "Ernie Image"); },
                     "--gguf-arch 'Ernie Image': expected a lower-case GGUF architecture name");
}
