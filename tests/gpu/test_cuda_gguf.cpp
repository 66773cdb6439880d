// GGUF DiTs on CUDA against the diffusers runs of golden_gguf (fixtures/gguf): the block-quantized weights are
// de-quantized on the host and run in the model's dtype, so the CUDA tolerances of test_cuda_pipeline apply:
// f32 (TF32 off) within relative L2 1e-3, bf16 within 3e-2 and cosine >= 0.999, with fp32 timesteps.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "golden.h"
#include "golden_cases.h"
#include "gpu_util.h"
#include "engine/engine.h"

using namespace ernie;

namespace {
std::string gguf_dir() { return test::data_dir() + "/gguf"; }
}  // namespace

class CudaGguf : public ::testing::TestWithParam<std::tuple<std::string, DType>> {};

TEST_P(CudaGguf, MatchesReference) {
  ERNIE_REQUIRE_GPU();
  auto [variant, dt] = GetParam();
  std::ifstream jf(gguf_dir() + "/golden_gguf.json");
  const nlohmann::json c = nlohmann::json::parse(jf)["case"];
  const auto golden = SafeTensorsFile::open(gguf_dir() + "/golden_gguf.safetensors");
  EngineOptions o = test::golden_run_options(dt);
  o.model = gguf_dir() + "/tiny256/model";
  o.files.diffusion_model = gguf_dir() + "/dit-" + variant + ".gguf";
  GenerateRequest r = test::request_of_case(c);
  r.init_latents = golden->tensor("case.latents_init").clone();
  const GenerateResult res = Engine::open(o)->generate(r);
  const double rel = dt == DType::F32 ? 1e-3 : 3e-2, cos = dt == DType::F32 ? -1 : 0.999;
  auto lat = test::tensors_close(res.latents, golden->tensor(variant + ".latents_final"), rel, cos);
  auto img = test::tensors_close(res.image_f32, golden->tensor(variant + ".image"), rel, cos);
  std::printf("gguf %s %s: latents %s; image %s\n", variant.c_str(), dtype_name(dt), lat.message(), img.message());
  EXPECT_TRUE(lat);
  EXPECT_TRUE(img);
}

INSTANTIATE_TEST_SUITE_P(Tiny256, CudaGguf,
                         ::testing::Combine(::testing::Values("Q8_0", "Q4_K", "Q5_1", "BF16"),
                                            ::testing::Values(DType::F32, DType::BF16)));
