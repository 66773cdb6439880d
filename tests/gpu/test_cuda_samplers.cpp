// The multistep samplers on CUDA against diffusers (tests/data/samplers-lora/golden2.*): dpmpp_2m and unipc from
// the given initial latents, f32 (TF32 off) within relative L2 1e-3, bf16 within 3e-2 and cosine >= 0.999 for
// the final latents (the golden run was fp32, so the DiT gets the fp32 timesteps, as test_cuda_pipeline's). The
// solvers' updates run with the op set on the device; torch's noise generators, computed on the host, give the
// same noise whatever the device.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/noise.h"
#include "golden2_cases.h"
#include "gpu_util.h"
#include "io/safetensors.h"

using namespace ernie;

namespace {

using test::golden2;
GenerateRequest sampler_case(int n, SamplerKind kind) { return test::sampler_request(n, kind); }

}  // namespace

class CudaSamplerGolden : public ::testing::TestWithParam<std::tuple<int, SamplerKind, DType>> {};

TEST_P(CudaSamplerGolden, MatchesReference) {
  ERNIE_REQUIRE_GPU();
  auto [n, kind, dt] = GetParam();
  EngineOptions o = test::golden_run_options(dt);
  auto pipe = Engine::open(o);
  GenerateResult res = pipe->generate(sampler_case(n, kind));
  const std::string k = "samplers.case." + std::to_string(n) + "." + sampler_id(kind) + ".latents_final";
  const double rel = dt == DType::F32 ? 1e-3 : 3e-2, cos = dt == DType::F32 ? -1 : 0.999;
  auto lat = test::tensors_close(res.latents, golden2().tensor(k), rel, cos);
  std::printf("%s %s: %s\n", k.c_str(), dtype_name(dt), lat.message());
  EXPECT_TRUE(lat);
}

INSTANTIATE_TEST_SUITE_P(Tiny, CudaSamplerGolden,
                         ::testing::Combine(::testing::Values(0, 1),
                                            ::testing::Values(SamplerKind::DpmPP2M, SamplerKind::UniPC),
                                            ::testing::Values(DType::F32, DType::BF16)));

// A seeded run on CUDA draws the noise torch's CPU generator gives (in the run's dtype), like the CPU engine.
TEST(CudaNoise, SeededNoiseIsTheHostGenerators) {
  ERNIE_REQUIRE_GPU();
  EngineOptions o;
  o.model = test::tiny_model();
  o.device = test::kGPU.str();
  o.dtype = "bf16";
  auto pipe = Engine::open(o);
  GenerateRequest r;
  r.prompt = "a cat";
  r.width = 20;
  r.height = 24;
  r.num_images = 2;
  r.steps = 1;
  r.seed = 42;
  GenerateRequest with_noise = r;
  with_noise.init_latents = initial_noise({2, 32, 6, 5}, 42, NoiseRng::Cpu, DType::BF16);
  EXPECT_EQ(pipe->generate(r).latents.to_vector(), pipe->generate(with_noise).latents.to_vector());
  // --rng cuda on the GPU: drawn there (bit for bit torch's, test_cuda_torch_rng), as initial_noise gives it
  r.rng = with_noise.rng = NoiseRng::Cuda;
  with_noise.init_latents = initial_noise({2, 32, 6, 5}, 42, NoiseRng::Cuda, DType::BF16, test::kGPU).to(kCPU);
  EXPECT_EQ(pipe->generate(r).latents.to_vector(), pipe->generate(with_noise).latents.to_vector());
}
