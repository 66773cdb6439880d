// The models on CUDA against the diffusers reference (golden tensors of the tiny fixture): f32 mode
// within relative L2 1e-3, bf16 within 3e-2 and cosine >= 0.999 (DESIGN.md).
#include "gpu_util.h"
#include "io/model_folder.h"
#include "models/ernie_dit.h"
#include "models/flux2_vae.h"
#include "models/mistral.h"
#include "models/prompt_enhancer.h"

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

namespace ernie::test {
namespace {

constexpr double kF32RelL2 = 1e-3, kBf16RelL2 = 3e-2, kBf16Cos = 0.999;

::testing::AssertionResult close_for(const Tensor& got, const Tensor& ref, DType dt) {
  return dt == DType::F32 ? tensors_close(got, ref, kF32RelL2) : tensors_close(got, ref, kBf16RelL2, kBf16Cos);
}

TEST(CudaGolden, DitForward) {
  ERNIE_REQUIRE_GPU();
  const ModelFolder m = ModelFolder::open(tiny_model(), false);
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    ErnieDit d = ErnieDit::load(m, kGPU, dt);
    Tensor out = d.forward(golden_tensor("dit.x").to_f32(), golden_tensor("dit.t").to_vector(),
                           golden_tensor("dit.text").to_f32(), golden_ids("dit.text_lens"));
    auto r = close_for(out, golden_tensor("dit.out"), dt);
    EXPECT_TRUE(r);
    std::printf("dit.out %s: %s\n", dtype_name(dt), r.message());
  }
}

// Rows at one timestep with different text lengths run packed (see ErnieDit::forward); a layer observer keeps
// them padded. On CUDA both agree, and the packed rows match the CPU's.
TEST(CudaGolden, DitPackedRowsMatchPadded) {
  ERNIE_REQUIRE_GPU();
  const ModelFolder m = ModelFolder::open(tiny_model(), false);
  const Tensor x = golden_tensor("dit.x").to_f32(), text = golden_tensor("dit.text").to_f32();
  const std::vector<int64_t> lens = golden_ids("dit.text_lens");
  const std::vector<float> t(2, golden_tensor("dit.t").to_vector()[0]);
  const Tensor cpu = ErnieDit::load(m, kCPU, DType::F32).forward(x, t, text, lens);
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    ErnieDit d = ErnieDit::load(m, kGPU, dt);
    const Tensor packed = d.forward(x, t, text, lens).to(kCPU).to_f32();
    const Tensor padded = d.forward(x, t, text, lens, [](int, const Tensor&) {}).to(kCPU).to_f32();
    EXPECT_TRUE(dt == DType::F32 ? tensors_close(packed, padded, 1e-5) : tensors_close(packed, padded, 1e-2, 0.9999));
    EXPECT_TRUE(close_for(packed, cpu, dt));
  }
}

TEST(CudaGolden, VaeDecodeAndEncode) {
  ERNIE_REQUIRE_GPU();
  const ModelFolder m = ModelFolder::open(tiny_model(), false);
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    // The decoder channels-last (the default) and NCHW.
    for (ops::Layout lay : {ops::Layout::NCHW, ops::Layout::NHWC}) {
      const char* ln = lay == ops::Layout::NHWC ? "NHWC" : "NCHW";
      Flux2Vae v = Flux2Vae::load(m, kGPU, dt, lay);
      auto r = close_for(v.decode(golden_tensor("vae.dec.z").to_f32()), golden_tensor("vae.dec.img"), dt);
      EXPECT_TRUE(r) << "vae.dec.img " << ln;
      std::printf("vae.dec.img %s %s: %s\n", dtype_name(dt), ln, r.message());
    }
    Flux2Vae vae = Flux2Vae::load(m, kGPU, dt);
    auto [mean, logvar] = vae.encode(golden_tensor("vae.enc.img").to_f32());
    auto rm = close_for(mean, golden_tensor("vae.enc.mean"), dt), rl = close_for(logvar, golden_tensor("vae.enc.logvar"), dt);
    EXPECT_TRUE(rm) << "vae.enc.mean";
    EXPECT_TRUE(rl) << "vae.enc.logvar";
    std::printf("vae.enc.mean %s: %s\nvae.enc.logvar %s: %s\n", dtype_name(dt), rm.message(), dtype_name(dt), rl.message());
  }
}

const nlohmann::json& golden_doc() {
  static nlohmann::json j = nlohmann::json::parse(std::ifstream(golden_json()));
  return j;
}

// Token ids of prompts[n] from the golden tokenizer case with the same text.
std::vector<int64_t> prompt_ids(size_t n) {
  const auto& j = golden_doc();
  const std::string prompt = j["prompts"].at(n).get<std::string>();
  const auto& cases = j["tokenizer_cases"];
  for (size_t i = 0; i < cases.size(); ++i)
    if (cases[i].get<std::string>() == prompt) return golden_ids("tok." + std::to_string(i) + ".ids");
  ADD_FAILURE() << "no tokenizer case for prompt '" << prompt << "'";
  return {};
}

TEST(CudaGolden, TextEncoderHiddenStates) {
  ERNIE_REQUIRE_GPU();
  const ModelFolder m = ModelFolder::open(tiny_model(), false);
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    TextEncoder te = TextEncoder::load(m, kGPU, dt);
    for (size_t i = 0; i < golden_doc()["prompts"].size(); ++i) {
      auto r = close_for(te.encode(prompt_ids(i)), golden_tensor("te." + std::to_string(i) + ".hidden"), dt);
      EXPECT_TRUE(r) << "te." << i << ".hidden";
      std::printf("te.%zu.hidden %s: %s\n", i, dtype_name(dt), r.message());
    }
  }
}

int64_t argmax_last_row(const Tensor& logits) {
  std::vector<float> v = logits.to_vector();
  const int64_t V = logits.dim(1);
  auto last = v.begin() + (logits.dim(0) - 1) * V;
  return int64_t(std::max_element(last, last + V) - last);
}

// The prompt enhancer LM: teacher-forced logits (causal attention) and a KV-cached greedy decode (causal
// attention at a query offset, one query row) reproducing the golden continuation.
TEST(CudaGolden, PromptEnhancerLogitsAndCachedDecode) {
  ERNIE_REQUIRE_GPU();
  const ModelFolder m = ModelFolder::open(tiny_model(), true);
  ASSERT_TRUE(m.pe_c.has_value());
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    MistralModel lm = MistralModel::load(*m.pe_c, *m.pe, kGPU, dt, -1, true);
    for (int n = 0; n < 2; ++n) {
      const std::vector<int64_t> prompt = golden_ids("pe." + std::to_string(n) + ".prompt_ids");
      const std::vector<int64_t> gen = golden_ids("pe." + std::to_string(n) + ".generated_ids");
      std::vector<int64_t> all = prompt;
      all.insert(all.end(), gen.begin(), gen.end());
      auto r = close_for(lm.logits(lm.forward(all, lm.num_layers())), golden_tensor("pe." + std::to_string(n) + ".logits"), dt);
      EXPECT_TRUE(r) << "pe." << n << ".logits";
      std::printf("pe.%d.logits %s: %s\n", n, dtype_name(dt), r.message());
      if (dt != DType::F32) continue;  // bf16 may flip a near-tie argmax; the logits check covers it
      KVCache cache = lm.new_cache(int64_t(all.size()) + 4);
      std::vector<int64_t> out;
      int64_t next = argmax_last_row(lm.logits(lm.forward(prompt, lm.num_layers(), &cache)));
      for (size_t i = 0; i < gen.size(); ++i) {
        out.push_back(next);
        if (i + 1 < gen.size()) next = argmax_last_row(lm.logits(lm.forward({next}, lm.num_layers(), &cache)));
      }
      EXPECT_EQ(out, gen) << "pe." << n << " greedy continuation";
      // generate_tokens' greedy loop on the GPU (the id stays on the device, read back a step behind): the
      // same continuation, cut at max_new_tokens and at an EOS id.
      for (int want : {1, 2, int(gen.size())}) {
        SamplingParams greedy;
        greedy.temperature = 0;
        Sampler sampler(greedy);
        GenerateOptions opt;
        opt.max_new_tokens = want;
        const Generation g = generate_tokens(lm, prompt, sampler, opt);
        EXPECT_EQ(g.ids, std::vector<int64_t>(gen.begin(), gen.begin() + want)) << "pe." << n << " max " << want;
        EXPECT_FALSE(g.stopped_on_eos);
      }
      if (gen.size() >= 3) {
        SamplingParams greedy;
        greedy.temperature = 0;
        Sampler sampler(greedy);
        GenerateOptions opt;
        opt.max_new_tokens = int(gen.size()) + 8;
        opt.eos_id = gen[2];
        const size_t stop = size_t(std::find(gen.begin(), gen.end(), gen[2]) - gen.begin()) + 1;
        const Generation g = generate_tokens(lm, prompt, sampler, opt);
        EXPECT_EQ(g.ids, std::vector<int64_t>(gen.begin(), gen.begin() + int64_t(stop))) << "pe." << n << " eos";
        EXPECT_TRUE(g.stopped_on_eos);
      }
    }
  }
}

}  // namespace
}  // namespace ernie::test
