// The converted single-file model: a round trip keeps every tensor (bf16 exactly), quantization follows
// the policy and stays within its error, and damaged files give clear errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli.h"
#include "core/error.h"
#include "golden.h"
#include "convert/convert.h"
#include "io/safetensors_spec.h"

namespace fs = std::filesystem;
using namespace ernie;
using ernie::test::fatal_problems;
using ernie::test::TempDir;

namespace {
std::vector<const Component*> components(const ModelFolder& m) {
  std::vector<const Component*> v = {&m.transformer_c, &m.text_encoder_c, &m.vae_c};
  if (m.pe_c) v.push_back(&*m.pe_c);
  return v;
}
// Valid for the reference safetensors library (io/safetensors_spec.h), and laid out for direct upload: every
// tensor whose size is a multiple of 64 bytes starts 64-byte aligned, every other one at a multiple of its
// element size.
void expect_spec_clean(const std::string& path) {
  auto file = SafeTensorsFile::open(path);
  const std::vector<std::string> probs = safetensors_spec_problems(*file);
  EXPECT_TRUE(probs.empty()) << (probs.empty() ? "" : probs[0]);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(file->data_section()) % 64, 0u);
  size_t aligned = 0;
  for (const TensorInfo& ti : file->tensors()) {
    const uintptr_t at = reinterpret_cast<uintptr_t>(file->data_section() + ti.begin);
    EXPECT_EQ(at % dtype_size(ti.dtype), 0u) << ti.name;
    if ((ti.end - ti.begin) % 64 == 0) {
      EXPECT_EQ(at % 64, 0u) << ti.name;
      ++aligned;
    }
  }
  EXPECT_GT(aligned, file->tensors().size() / 2);  // most of them
}
}  // namespace

TEST(ModelFile, Bf16RoundTripIsExact) {
  TempDir d;
  ModelFolder src = ModelFolder::open(test::tiny_model());
  std::string f = d.str() + "/tiny.safetensors";
  ConvertStats st = convert_model(src, f, {});
  EXPECT_EQ(st.fp8 + st.int8, 0u);
  ModelFolder m = ModelFolder::open(f);
  EXPECT_TRUE(m.is_single_file());
  EXPECT_EQ(fatal_problems(m), "");
  EXPECT_EQ(m.dit.hidden_size, src.dit.hidden_size);
  EXPECT_EQ(m.read_file("tokenizer/tokenizer.json"), src.read_file("tokenizer/tokenizer.json"));
  EXPECT_EQ(m.pe_tokenizer_rel, "pe_tokenizer");
  EXPECT_TRUE(m.has_file("pe_tokenizer/chat_template.jinja"));
  auto a = components(src), b = components(m);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]->params(), b[i]->params()) << a[i]->name;
    for (const TensorSpec& s : a[i]->specs) {
      if (s.name[0] == '@' || !a[i]->ckpt.contains(a[i]->prefix + s.name)) continue;
      EXPECT_EQ(a[i]->tensor(s.name).to_vector(), b[i]->tensor(s.name).to_vector()) << a[i]->name << " " << s.name;
    }
  }
  expect_spec_clean(f);
}

TEST(ModelFile, QuantizedFollowsPolicyAndStaysClose) {
  for (WeightFormat fmt : {WeightFormat::FP8, WeightFormat::INT8}) {
    TempDir d;
    ModelFolder src = ModelFolder::open(test::tiny_model());
    std::string f = d.str() + "/q.safetensors";
    ConvertOptions opt;
    opt.format = fmt;
    opt.policy.keep_first_last_dit_blocks = false;  // the tiny DiT has only two blocks
    ConvertStats st = convert_model(src, f, opt);
    EXPECT_GT(st.int8, 0u);  // the text models' projections are int8 either way
    EXPECT_EQ(st.fp8 > 0, fmt == WeightFormat::FP8);
    ModelFolder m = ModelFolder::open(f);
    EXPECT_EQ(fatal_problems(m), "");
    size_t quantized = 0;
    auto a_all = components(src), b_all = components(m);
    for (size_t ci = 0; ci < a_all.size(); ++ci) {
      const Component *a = a_all[ci], *b = b_all[ci];
      for (const TensorSpec& s : a->specs) {
        if (s.name[0] == '@' || !a->ckpt.contains(a->prefix + s.name)) continue;
        bool q = b->is_quantized(s.name);
        EXPECT_EQ(q, opt.policy.quantized(a->name, s.name, src.dit.num_layers)) << s.name;
        if (!q) continue;
        ++quantized;
        const bool fp8 = fmt == WeightFormat::FP8 && a->name == "transformer";
        EXPECT_EQ(b->ckpt.find(b->prefix + s.name)->dtype, fp8 ? DType::F8_E4M3 : DType::I8) << s.name;
        // fp8 e4m3 has a 3-bit mantissa (~3% relative error per value); int8 per-channel ~1%.
        EXPECT_TRUE(test::tensors_close(b->tensor(s.name), a->tensor(s.name), fp8 ? 0.05 : 0.02, 0.998)) << s.name;
      }
    }
    EXPECT_EQ(quantized, st.fp8 + st.int8);
    expect_spec_clean(f);  // with its F32 per-channel scales of odd sizes
  }
}

TEST(ModelFile, PolicyKeepsSensitiveLayers) {
  QuantPolicy p;
  EXPECT_FALSE(p.quantized("transformer", "time_embedding.linear_1.weight", 36));
  EXPECT_FALSE(p.quantized("transformer", "adaLN_modulation.1.weight", 36));
  EXPECT_FALSE(p.quantized("transformer", "text_proj.weight", 36));
  EXPECT_FALSE(p.quantized("transformer", "final_linear.weight", 36));
  EXPECT_FALSE(p.quantized("transformer", "layers.0.mlp.up_proj.weight", 36));
  EXPECT_FALSE(p.quantized("transformer", "layers.35.self_attention.to_q.weight", 36));
  EXPECT_FALSE(p.quantized("transformer", "layers.1.adaLN_sa_ln.weight", 36));
  EXPECT_TRUE(p.quantized("transformer", "layers.1.self_attention.to_q.weight", 36));
  EXPECT_TRUE(p.quantized("transformer", "layers.34.mlp.linear_fc2.weight", 36));
  EXPECT_TRUE(p.quantized("text_encoder", "layers.3.self_attn.q_proj.weight", 36));
  EXPECT_EQ(p.format("text_encoder", DType::F8_E4M3), DType::I8);  // the text models are int8 either way
  EXPECT_EQ(p.format("pe", DType::F8_E4M3), DType::I8);
  EXPECT_EQ(p.format("transformer", DType::F8_E4M3), DType::F8_E4M3);
  EXPECT_EQ(p.text_encoder_quantization(DType::F8_E4M3), DType::I8);
  EXPECT_EQ(p.text_encoder_quantization(std::nullopt), std::nullopt);
  EXPECT_FALSE(p.quantized("text_encoder", "embed_tokens.weight", 36));
  EXPECT_FALSE(p.quantized("vae", "decoder.conv_in.weight", 36));
  p.keep.push_back("mlp.");
  EXPECT_FALSE(p.quantized("transformer", "layers.34.mlp.linear_fc2.weight", 36));
}

TEST(ModelFile, QuantizeRowsRoundTrip) {
  std::vector<float> v(4 * 64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(float(i) * 0.37f) * float(1 + i / 64);
  Tensor w = Tensor::from_vector(v, {4, 64});
  for (WeightFormat f : {WeightFormat::FP8, WeightFormat::INT8}) {
    auto [q, s] = quantize_rows(w, f);
    EXPECT_EQ(q.dtype(), f == WeightFormat::FP8 ? DType::F8_E4M3 : DType::I8);
    EXPECT_TRUE(test::tensors_close(dequantize_rows(q, s), w, f == WeightFormat::FP8 ? 0.04 : 0.01, 0.999));
  }
}

TEST(ModelFile, DamagedFilesGiveClearErrors) {
  TempDir d;
  std::string f = d.str() + "/tiny.safetensors";
  convert_model(ModelFolder::open(test::tiny_model()), f, {});
  // Truncated.
  std::string t = d.str() + "/trunc.safetensors";
  fs::copy_file(f, t);
  fs::resize_file(t, fs::file_size(t) / 2);
  try {
    ModelFolder::open(t);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  // A plain checkpoint is not a converted model.
  try {
    ModelFolder::open(test::tiny_model() + "/vae/diffusion_pytorch_model.safetensors");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not an ernie-image converted model"), std::string::npos) << e.what();
  }
  // doctor checks a converted file, and reports a damaged one.
  auto ok = test::run_cli("doctor --model " + f);
  EXPECT_EQ(ok.status, 0) << ok.out;
  auto bad = test::run_cli("doctor --model " + t);
  EXPECT_NE(bad.status, 0) << bad.out;
}

TEST(ModelFile, ConvertCli) {
  TempDir d;
  auto r = test::run_cli("convert -q --model " + test::tiny_model() + " -o " + d.str() + "/m.safetensors --dtype fp8");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("quantized to fp8"), std::string::npos) << r.out;
  auto bad = test::run_cli("convert --model " + test::tiny_model() + " -o " + d.str() + "/x.safetensors --dtype fp4");
  EXPECT_NE(bad.status, 0);
  // --calibrate: a missing prompts file, and a non-fp8 target, are refused before anything is written.
  auto cal = test::run_cli("convert --model " + test::tiny_model() + " -o " + d.str() +
                           "/y.safetensors --dtype fp8 --calibrate " + d.str() + "/none.txt");
  EXPECT_NE(cal.status, 0);
  EXPECT_NE(cal.out.find("cannot open the calibration prompts"), std::string::npos) << cal.out;
  EXPECT_FALSE(fs::exists(d.str() + "/y.safetensors"));
  {
    std::ofstream p(d.str() + "/p.txt");
    p << "a cat\n";
  }
  auto i8 = test::run_cli("convert --model " + test::tiny_model() + " -o " + d.str() + "/y.safetensors --dtype int8 " +
                          "--calibrate " + d.str() + "/p.txt");
  EXPECT_NE(i8.status, 0);
  EXPECT_NE(i8.out.find("for --dtype fp8"), std::string::npos) << i8.out;
  auto size = test::run_cli("convert --model " + test::tiny_model() + " -o " + d.str() + "/y.safetensors --dtype fp8 " +
                            "--calibrate " + d.str() + "/p.txt --calibrate-size 64");
  EXPECT_NE(size.status, 0);
  EXPECT_NE(size.out.find("expected WxH"), std::string::npos) << size.out;
  // And a real one: static scales in the file, which generates.
  auto ok = test::run_cli("convert -q --model " + test::tiny_model() + " -o " + d.str() + "/c.safetensors --dtype fp8 " +
                          "--quantize-all-blocks --calibrate " + d.str() + "/p.txt --calibrate-steps 1 --calibrate-size 32x32");
  ASSERT_EQ(ok.status, 0) << ok.out;
  EXPECT_TRUE(ModelFolder::open(d.str() + "/c.safetensors", false)
                  .transformer_c.input_scale("layers.0.mlp.gate_proj.weight")
                  .defined());
  auto gen = test::run_cli("generate -q --model " + d.str() + "/c.safetensors -p \"a cat\" -W 32 -H 32 --steps 1 -o " +
                           d.str() + "/c.png");
  EXPECT_EQ(gen.status, 0) << gen.out;
  EXPECT_TRUE(fs::exists(d.str() + "/c.png"));
}
