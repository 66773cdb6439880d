// LoRA on CUDA against diffusers (tests/data/samplers-lora/golden2.*): the tiny diffusers-format adapter at scales
// 1.0 and 0.6 merged on the device, f32 (TF32 off) within relative L2 1e-3, bf16 within 3e-2 and cosine >= 0.999;
// the merge itself (lora_delta, merge_lora) against the CPU's; the 8-bit DiT (merged, then quantized) closer to
// the LoRA run than to the base model.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "golden2_cases.h"
#include "gpu_util.h"
#include "io/model_folder.h"
#include "io/safetensors.h"
#include "models/ernie_dit.h"
#include "models/lora_merge.h"
#include "models/quant_policy.h"

using namespace ernie;

namespace {

using test::golden2;
std::string tiny_lora() { return test::golden2_dir() + "/lora/tiny_lora.safetensors"; }

GenerateRequest lora_case(float scale) {
  LoraRef l;
  l.path = tiny_lora();
  l.scale = scale;
  return test::lora_request(scale != 0 ? std::vector<LoraRef>{l} : std::vector<LoraRef>{});
}

std::unique_ptr<Engine> engine(DType dt, const std::string& quantize = "") {
  EngineOptions o = test::golden_run_options(dt);
  if (!quantize.empty()) o.quantize = quantize;
  return Engine::open(o);
}

}  // namespace

class CudaLoraGolden : public ::testing::TestWithParam<std::tuple<float, DType>> {};

TEST_P(CudaLoraGolden, MatchesReference) {
  ERNIE_REQUIRE_GPU();
  auto [scale, dt] = GetParam();
  auto pipe = engine(dt);
  const char* k = scale == 1.f ? "lora.scale_1.0.latents_final" : "lora.scale_0.6.latents_final";
  GenerateResult res = pipe->generate(lora_case(scale));
  const double rel = dt == DType::F32 ? 1e-3 : 3e-2, cos = dt == DType::F32 ? -1 : 0.999;
  auto lat = test::tensors_close(res.latents, golden2().tensor(k), rel, cos);
  std::printf("%s %s: %s\n", k, dtype_name(dt), lat.message());
  EXPECT_TRUE(lat);
  // Back to the base model on the same engine: its exact weights again.
  res = pipe->generate(lora_case(0));
  EXPECT_TRUE(test::tensors_close(res.latents, golden2().tensor("lora.none.latents_final"), rel, cos));
}

INSTANTIATE_TEST_SUITE_P(Tiny, CudaLoraGolden,
                         ::testing::Combine(::testing::Values(1.f, 0.6f), ::testing::Values(DType::F32, DType::BF16)));

TEST(CudaLora, MergeMatchesTheCpu) {
  ERNIE_REQUIRE_GPU();
  static ModelFolder m = ModelFolder::open(test::tiny_model());
  auto a = std::make_shared<const LoraAdapter>(load_lora(tiny_lora(), m.dit));
  const std::string w = "layers.1.mlp.linear_fc2.weight";
  const LoraSet set = {{a, 0.7f}, {a, -0.2f}};
  auto d = test::tensors_close(test::down(lora_delta(set, w, test::kGPU)), lora_delta(set, w, kCPU), 1e-5);
  EXPECT_TRUE(d) << d.message();
  Tensor base = test::rnd({64, 160}, 3);
  Tensor on_gpu = merge_lora(test::up(base, DType::BF16), set, w, test::kGPU);
  EXPECT_EQ(on_gpu.dtype(), DType::F32);
  auto mg = test::tensors_close(test::down(on_gpu), merge_lora(test::as_dtype(base, DType::BF16), set, w, kCPU), 1e-6);
  EXPECT_TRUE(mg) << mg.message();
}

// The 8-bit DiT with every block quantized and a LoRA on CUDA (bf16) tracks the CPU's, fp8 and int8: merged in
// F32, then quantized (test_lora: that one is nearer the f32 LoRA DiT than the base model is), or at_runtime (the
// q|k|v side stacked block-diagonally, the 8-bit GEMMs on a float input).
static void expect_eight_bit_lora_tracks_cpu(bool at_runtime) {
  ModelFolder m = ModelFolder::open(test::tiny_model(), false);
  QuantPolicy all;
  all.keep_first_last_dit_blocks = false;
  const LoraSet set = {{std::make_shared<const LoraAdapter>(load_lora(tiny_lora(), m.dit)), 1.f}};
  const auto [x, text, t, lens] = test::dit_inputs();
  for (DType qt : {DType::F8_E4M3, DType::I8}) {
    Tensor ref = ErnieDit::load(m, kCPU, DType::F32, false, qt, all, set, at_runtime).forward(x, t, text, lens);
    Tensor got = test::down(
        ErnieDit::load(m, test::kGPU, DType::BF16, false, qt, all, set, at_runtime).forward(x, t, text, lens));
    auto r = test::tensors_close(got, ref, 3e-2, 0.999);
    std::printf("dit.out %s weights + LoRA%s, CUDA bf16 vs CPU: %s\n", dtype_name(qt), at_runtime ? " at runtime" : "",
                r.message());
    EXPECT_TRUE(r);
  }
}

TEST(CudaLora, EightBitTracksCpu) {
  ERNIE_REQUIRE_GPU();
  expect_eight_bit_lora_tracks_cpu(false);
}

TEST(CudaLora, AtRuntimeTracksCpu) {  // --lora-apply-mode at_runtime
  ERNIE_REQUIRE_GPU();
  expect_eight_bit_lora_tracks_cpu(true);
}

// A switch through the pinned host cache (models/host_weight_cache.h) starts from the exact stored weights:
// loads through the cache (filled, then read back) give bit-identical outputs to loads from the file, base and
// LoRA, bf16 and 8-bit at load.
TEST(CudaLora, PinnedBaseWeightsAreTheStoredOnes) {
  ERNIE_REQUIRE_GPU();
  ModelFolder m = ModelFolder::open(test::tiny_model(), false);
  const LoraSet set = {{std::make_shared<const LoraAdapter>(load_lora(tiny_lora(), m.dit)), 0.8f}};
  const test::DitInputs in = test::dit_inputs();
  for (std::optional<DType> qt : {std::optional<DType>(), std::optional<DType>(DType::F8_E4M3)}) {
    HostWeightCache cache(test::kGPU, size_t(1) << 30);
    auto run = [&](const LoraSet& s, HostWeightCache* c) {
      const ErnieDit d = ErnieDit::load(m, test::kGPU, DType::BF16, false, qt, QuantPolicy{}, s, false, c);
      return test::down(d.forward(in.x, in.t, in.text, in.text_lens)).to_vector();
    };
    const std::vector<float> lora = run(set, nullptr), base = run({}, nullptr);
    EXPECT_EQ(run(set, &cache), lora);  // fills the cache
    EXPECT_GT(cache.bytes(), size_t(0));
    EXPECT_EQ(run({}, &cache), base);   // from the pinned copies
    EXPECT_EQ(run(set, &cache), lora);
    EXPECT_NE(base, lora);
  }
}

// Issue 45 item 15 on the CUDA merge path: finite factors (A = B = 1e38) whose merged weight is not are an error
// naming the LoRA and the module, merged or kept as a runtime side.
TEST(CudaLora, MergeThatOverflowsIsAnError) {
  ERNIE_REQUIRE_GPU();
  auto a = std::make_shared<LoraAdapter>();
  a->path = "/loras/huge.safetensors";
  LoraFactors f;
  f.up = Tensor::from_vector(std::vector<float>(4, 1e38f), {4, 1});
  f.down = Tensor::from_vector(std::vector<float>(4, 1e38f), {1, 4});
  f.alpha = 1, f.rank = 1;
  a->weights["layers.0.mlp.up_proj.weight"] = f;
  const LoraSet set = {{a, 1.f}};
  const Device cuda = Device::parse("cuda");
  for (int runtime = 0; runtime < 2; ++runtime) {
    try {
      if (runtime) lora_side(set, "layers.0.mlp.up_proj.weight", cuda, DType::BF16);
      else merge_lora(Tensor::zeros({4, 4}, DType::F32), set, "layers.0.mlp.up_proj.weight", cuda);
      ADD_FAILURE() << "an overflowing " << (runtime ? "side" : "merge") << " was accepted on CUDA";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("huge.safetensors"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("layers.0.mlp.up_proj.weight"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("non-finite"), std::string::npos) << e.what();
    }
  }
  a->weights.begin()->second.up = Tensor::from_vector(std::vector<float>(4, 1e-3f), {4, 1});
  a->weights.begin()->second.down = Tensor::from_vector(std::vector<float>(4, 1e-3f), {1, 4});
  EXPECT_NO_THROW(merge_lora(Tensor::zeros({4, 4}, DType::F32), set, "layers.0.mlp.up_proj.weight", cuda));
}
