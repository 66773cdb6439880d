// The Mistral language model on the CPU (fp32) against the diffusers/transformers golden data: the text
// encoder's hidden_states[-2] and the prompt enhancer's logits, greedy continuation and KV cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json.h"
#include "golden.h"
#include "io/configs.h"
#include "convert/convert.h"
#include "io/model_folder.h"
#include "io/safetensors.h"
#include "models/mistral.h"
#include "text/tokenizer.h"
#include "ops/ops.h"

namespace ernie {
namespace {

using test::golden_ids;
using test::golden_tensor;
using test::kCpuRelL2;
using test::tensors_close;

// tensors_close, printing the closeness so the logs show the measured margin.
::testing::AssertionResult close_to(const Tensor& actual, const Tensor& expected, double rel_l2, const std::string& what,
                                    double min_cosine = -1) {
  ::testing::AssertionResult r = tensors_close(actual, expected, rel_l2, min_cosine);
  std::cout << "[ closeness ] " << what << ": " << r.message() << std::endl;
  return r;
}

const nlohmann::json& golden_doc() {
  static nlohmann::json j = read_json_file(test::golden_json());
  return j;
}

const ModelFolder& tiny();

// Token ids of prompts[n] from the model's tokenizer, cross-checked against the golden tokenizer case with
// the same text where there is one.
std::vector<int64_t> prompt_ids(size_t n) {
  static Tokenizer tok = Tokenizer::load(tiny().tokenizer_dir);
  const auto& j = golden_doc();
  const std::string prompt = j["prompts"].at(n).get<std::string>();
  std::vector<int64_t> ids = tok.encode(prompt);
  const auto& cases = j["tokenizer_cases"];
  for (size_t i = 0; i < cases.size(); ++i)
    if (cases[i].get<std::string>() == prompt) { EXPECT_EQ(ids, golden_ids("tok." + std::to_string(i) + ".ids")); }
  return ids;
}

const ModelFolder& tiny() {
  static ModelFolder m = ModelFolder::open(test::tiny_model());
  return m;
}

int64_t argmax_row(const Tensor& logits, int64_t row) {
  auto v = ops::slice(logits, 0, row, 1).to_vector();
  return int64_t(std::max_element(v.begin(), v.end()) - v.begin());
}

TEST(TextEncoder, MatchesGoldenHiddenStatesMinus2) {
  TextEncoder te = TextEncoder::load(tiny(), kCPU, DType::F32);
  const size_t n = golden_doc()["prompts"].size();
  ASSERT_EQ(n, 3u);
  for (size_t i = 0; i < n; ++i) {
    std::vector<int64_t> ids = prompt_ids(i);
    Tensor h = te.encode(ids);
    EXPECT_EQ(h.dtype(), DType::F32);
    EXPECT_TRUE(close_to(h, golden_tensor("te." + std::to_string(i) + ".hidden"), kCpuRelL2, "te." + std::to_string(i) + ".hidden"));
  }
}

TEST(TextEncoder, RunsOnlyUpToLayerLMinus2) {
  // Running all layers (or fewer) must not match: hidden_states[-2] is exactly layers 0..L-2.
  const ModelFolder& m = tiny();
  MistralModel lm = MistralModel::load(m.text_encoder_c, m.text_encoder, kCPU, DType::F32);
  ASSERT_EQ(lm.num_layers(), m.text_encoder.num_hidden_layers);
  std::vector<int64_t> ids = prompt_ids(0);
  Tensor golden = golden_tensor("te.0.hidden");
  EXPECT_TRUE(tensors_close(lm.forward(ids, lm.num_layers() - 1), golden, kCpuRelL2));
  EXPECT_FALSE(tensors_close(lm.forward(ids, lm.num_layers()), golden, 1e-2));
  EXPECT_FALSE(tensors_close(lm.forward(ids, lm.num_layers() - 2), golden, 1e-2));
}

struct PeCase {
  std::vector<int64_t> prompt, generated, all;
};
PeCase pe_case(int n) {
  PeCase c;
  c.prompt = golden_ids("pe." + std::to_string(n) + ".prompt_ids");
  c.generated = golden_ids("pe." + std::to_string(n) + ".generated_ids");
  c.all = c.prompt;
  c.all.insert(c.all.end(), c.generated.begin(), c.generated.end());
  return c;
}

MistralModel load_pe() {
  const ModelFolder& m = tiny();
  EXPECT_TRUE(m.pe_c.has_value());
  return MistralModel::load(*m.pe_c, *m.pe, kCPU, DType::F32, -1, true);
}

TEST(PromptEnhancerLM, TeacherForcedLogitsMatchGolden) {
  MistralModel lm = load_pe();
  for (int n = 0; n < 2; ++n) {
    PeCase c = pe_case(n);
    Tensor logits = lm.logits(lm.forward(c.all, lm.num_layers()));
    EXPECT_TRUE(close_to(logits, golden_tensor("pe." + std::to_string(n) + ".logits"), kCpuRelL2, "pe." + std::to_string(n) + ".logits"));
  }
}

TEST(PromptEnhancerLM, GoldenDataTellsYarnFromPlainRope) {
  // The golden logits are sensitive to the RoPE frequencies: plain theta (as stable-diffusion.cpp uses)
  // must not pass where YaRN does.
  const ModelFolder& m = tiny();
  MistralConfig plain = *m.pe;
  plain.rope_type = "default";
  MistralModel lm = MistralModel::load(*m.pe_c, plain, kCPU, DType::F32, -1, true);
  PeCase c = pe_case(0);
  EXPECT_FALSE(close_to(lm.logits(lm.forward(c.all, lm.num_layers())), golden_tensor("pe.0.logits"), kCpuRelL2,
                        "plain-theta RoPE pe.0.logits"));
}

TEST(PromptEnhancerLM, GreedyDecodeWithKvCacheReproducesGolden) {
  MistralModel lm = load_pe();
  const int64_t eos = lm.config().eos_token_id;
  for (int n = 0; n < 2; ++n) {
    PeCase c = pe_case(n);
    ASSERT_EQ(c.generated.size(), 24u);
    const int64_t P = int64_t(c.prompt.size());
    KVCache cache = lm.new_cache(P + 24);
    Tensor h = lm.forward(c.prompt, lm.num_layers(), &cache);  // prefill
    std::vector<Tensor> rows{lm.logits(ops::slice(h, 0, P - 1, 1))};
    std::vector<int64_t> out;
    while (out.size() < 24) {
      const int64_t next = argmax_row(rows.back(), 0);
      out.push_back(next);
      if (next == eos || out.size() == 24) break;
      rows.push_back(lm.logits(lm.forward({next}, lm.num_layers(), &cache)));  // one cached step
    }
    EXPECT_EQ(out, c.generated) << "case " << n;
    EXPECT_EQ(cache.length, P + int64_t(out.size()) - 1);
    // Incremental logits equal the teacher-forced ones (golden rows P-1 .. P+22, and our own full pass).
    Tensor incremental = ops::concat(rows, 0);
    Tensor golden = ops::slice(golden_tensor("pe." + std::to_string(n) + ".logits"), 0, P - 1, int64_t(rows.size()));
    EXPECT_TRUE(close_to(incremental, golden, kCpuRelL2, "pe." + std::to_string(n) + " cached logits vs golden"));
    Tensor full = lm.logits(lm.forward(c.all, lm.num_layers()));
    EXPECT_TRUE(close_to(incremental, ops::slice(full, 0, P - 1, int64_t(rows.size())), 1e-5,
                         "pe." + std::to_string(n) + " cached vs full-pass logits"));
  }
}

TEST(PromptEnhancerLM, CacheAndIdErrors) {
  MistralModel lm = load_pe();
  KVCache cache = lm.new_cache(4);
  lm.forward({1, 2, 3}, lm.num_layers(), &cache);
  EXPECT_THROW(lm.forward({4, 5}, lm.num_layers(), &cache), Error);  // 3 + 2 > 4
  EXPECT_THROW(lm.forward({int64_t(lm.config().vocab_size)}, lm.num_layers()), Error);
  EXPECT_THROW(lm.forward({}, lm.num_layers()), Error);
  TextEncoder te = TextEncoder::load(tiny(), kCPU, DType::F32);
  EXPECT_THROW(te.encode({}), Error);
  const ModelFolder& m = tiny();
  MistralModel no_head = MistralModel::load(m.text_encoder_c, m.text_encoder, kCPU, DType::F32, 1);
  EXPECT_THROW(no_head.logits(no_head.forward({1}, 1)), Error);
  EXPECT_THROW(MistralModel::load(m.text_encoder_c, m.text_encoder, kCPU, DType::BF16), Error);
}

TEST(TextEncoder, WrongShapeTensorIsAClearErrorAtLoad) {
  test::TempDir dir;
  namespace fs = std::filesystem;
  fs::copy(test::tiny_model(), dir.path / "model", fs::copy_options::recursive);
  const std::string file = (dir.path / "model" / "text_encoder" / "model.safetensors").string();
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::string bad;
  {
    auto f = SafeTensorsFile::open(file);
    for (const TensorInfo& ti : f->tensors()) {
      Tensor t = f->tensor(ti.name).clone();
      if (ti.name.find("layers.1.mlp.up_proj.weight") != std::string::npos) {
        bad = ti.name;
        t = ops::slice(t.to_f32(), 0, 0, t.dim(0) - 1).cast(t.dtype());  // one output row short
      }
      tensors.emplace_back(ti.name, t);
    }
  }
  ASSERT_FALSE(bad.empty());
  save_safetensors(file, tensors);
  ModelFolder m = ModelFolder::open((dir.path / "model").string());
  try {
    TextEncoder::load(m, kCPU, DType::F32);
    ADD_FAILURE() << "loading a mis-shaped tensor did not fail";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(bad), std::string::npos) << msg;
    EXPECT_NE(msg.find("[95, 48]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[96, 48]"), std::string::npos) << msg;
  }
}

TEST(TextEncoder, ConvertedSingleFileModels) {
  // bf16 conversion is lossless: same golden results. int8 per-channel: close, not exact.
  test::TempDir dir;
  for (WeightFormat f : {WeightFormat::BF16, WeightFormat::INT8}) {
    const std::string file = dir.str() + "/model-" + weight_format_name(f) + ".safetensors";
    ConvertOptions opt;
    opt.format = f;
    convert_model(tiny(), file, opt);
    ModelFolder m = ModelFolder::open(file);
    TextEncoder te = TextEncoder::load(m, kCPU, DType::F32);
    Tensor golden = golden_tensor("te.0.hidden");
    const std::string fmt = weight_format_name(f);
    EXPECT_TRUE(close_to(te.encode(prompt_ids(0)), golden, f == WeightFormat::BF16 ? kCpuRelL2 : 5e-2,
                         fmt + " file te.0.hidden", 0.99));
    MistralModel pe = MistralModel::load(*m.pe_c, *m.pe, kCPU, DType::F32, -1, true);
    PeCase c = pe_case(0);
    EXPECT_TRUE(close_to(pe.logits(pe.forward(c.all, pe.num_layers())), golden_tensor("pe.0.logits"),
                         f == WeightFormat::BF16 ? kCpuRelL2 : 5e-2, fmt + " file pe.0.logits", 0.99));
  }
}

TEST(MistralRope, YarnFrequenciesOfTheReleasedConfig) {
  MistralConfig c;  // defaults = the released text encoder: head_dim 128, theta 1e6, yarn factor 16, L0 16384
  RopeFrequencies r = mistral_rope_frequencies(c);
  ASSERT_EQ(r.inv_freq.size(), 64u);
  EXPECT_FLOAT_EQ(r.attention_scaling, 1.f);  // mscale == mscale_all_dim
  auto base = [](int j) { return std::pow(1e6, -2.0 * j / 128); };
  for (int j = 0; j <= 20; ++j) EXPECT_NEAR(r.inv_freq[size_t(j)] / base(j), 1.0, 1e-6) << j;  // low = 20
  for (int j = 37; j < 64; ++j) EXPECT_NEAR(r.inv_freq[size_t(j)] / base(j), 1.0 / 16, 1e-6) << j;  // high = 37
  EXPECT_NEAR(r.inv_freq[28] / base(28), 9.0 / 17 + 8.0 / 17 / 16, 1e-6);  // 0.559
  EXPECT_NEAR(r.inv_freq[36] / base(36), 1.0 / 17 + 16.0 / 17 / 16, 1e-6);  // 0.118

  c.rope_type = "default";
  r = mistral_rope_frequencies(c);
  for (int j = 0; j < 64; ++j) EXPECT_NEAR(r.inv_freq[size_t(j)] / base(j), 1.0, 1e-6);
}

TEST(MistralRope, ConfigParsingOfYarnAndLlama4Scale) {
  auto parse = [](const char* text) { return parse_mistral_config(nlohmann::json::parse(text), "config.json"); };
  // No mscale keys: transformers derives attention_factor = 0.1 ln(factor) + 1.
  MistralConfig a = parse(R"({"model_type": "ministral3", "head_dim": 8, "rope_parameters": {"rope_type": "yarn",
      "factor": 16.0, "original_max_position_embeddings": 16384, "rope_theta": 1e6, "llama_4_scaling_beta": 0.1}})");
  EXPECT_NEAR(mistral_rope_frequencies(a).attention_scaling, 1 + 0.1 * std::log(16.0), 1e-6);
  EXPECT_DOUBLE_EQ(a.llama_4_scaling_beta, 0.1);
  // The llama-4 query scale is exactly 1 below original_max_position_embeddings (all golden data lies there,
  // so this path is not covered by golden tensors), then 1 + beta ln(1 + floor(pos / 16384)).
  EXPECT_EQ(llama4_query_scale(a, 0), 1.f);
  EXPECT_EQ(llama4_query_scale(a, 16383), 1.f);
  EXPECT_FLOAT_EQ(llama4_query_scale(a, 16384), float(1 + 0.1 * std::log(2.0)));
  EXPECT_FLOAT_EQ(llama4_query_scale(a, 3 * 16384 + 5), float(1 + 0.1 * std::log(4.0)));
  // model_type mistral (the text encoder) ignores llama_4_scaling_beta.
  MistralConfig b = parse(R"({"model_type": "mistral", "rope_parameters": {"rope_type": "yarn", "factor": 16.0,
      "original_max_position_embeddings": 16384, "mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.1}})");
  EXPECT_EQ(b.llama_4_scaling_beta, 0);
  EXPECT_EQ(llama4_query_scale(b, 100000), 1.f);
  EXPECT_FLOAT_EQ(mistral_rope_frequencies(b).attention_scaling, 1.f);
  // No rope parameters at all: plain theta.
  MistralConfig d = parse(R"({"rope_theta": 10000.0})");
  EXPECT_EQ(d.rope_type, "default");
  EXPECT_THROW(parse(R"({"rope_parameters": {"rope_type": "yarn", "factor": -2.0}})"), Error);
}

}  // namespace
}  // namespace ernie
