// End to end on CUDA against the diffusers golden cases (golden.json `cases`), from the given initial
// latents: f32 (TF32 off) within relative L2 1e-3, bf16 within 3e-2 and cosine >= 0.999, for the final
// latents and the float image. The golden run was fp32, so the bf16 run feeds the DiT the same fp32
// timesteps (the reference in bf16 rounds them, 888.9 -> 888, which changes the tiny random model's
// output by up to 16% — a difference of inputs, not of kernels).
#include <gtest/gtest.h>

#include "golden_cases.h"
#include "gpu_util.h"
#include "engine/engine.h"

using namespace ernie;

class CudaGoldenCase : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(CudaGoldenCase, MatchesReference) {
  ERNIE_REQUIRE_GPU();
  auto [n, dt] = GetParam();
  EngineOptions o = test::golden_run_options(dt);
  auto pipe = Engine::open(o);
  GenerateResult res = pipe->generate(test::golden_case(n));
  const std::string p = "case." + std::to_string(n) + ".";
  const double rel = dt == DType::F32 ? 1e-3 : 3e-2, cos = dt == DType::F32 ? -1 : 0.999;
  auto lat = test::tensors_close(res.latents, test::golden_tensor(p + "latents_final"), rel, cos);
  auto img = test::tensors_close(res.image_f32, test::golden_tensor(p + "image"), rel, cos);
  std::printf("case %d %s: latents %s; image %s\n", n, dtype_name(dt), lat.message(), img.message());
  EXPECT_TRUE(lat);
  EXPECT_TRUE(img);
}

INSTANTIATE_TEST_SUITE_P(Tiny, CudaGoldenCase,
                         ::testing::Combine(::testing::Values(0, 1, 2), ::testing::Values(DType::F32, DType::BF16)));
