// Full size, the same random weights on both backends: CUDA bf16 against the CPU fp32 reference for the
// text encoder on a 64-token prompt and one DiT forward at 256x256 (256 image + 64 text tokens): cosine
// >= 0.999 (issue 5). Relative L2 is bounded at 5e-2, looser than the tiny fixture's 3e-2: bf16 rounding
// compounds over 25 / 36 full-width layers (measured on the H200: 3.2e-2 and 3.3e-2). Minutes of CPU work and ~16 GB of host memory: DISABLED_, run on the GPU machine with
// --gtest_also_run_disabled_tests --gtest_filter='CudaFullSize.*'.
#include <cstdio>
#include <random>

#include "gpu_util.h"
#include "models/ernie_dit.h"
#include "models/mistral.h"

namespace ernie::test {
namespace {

TEST(CudaFullSize, DISABLED_TextEncoder64Tokens) {
  ERNIE_REQUIRE_GPU();
  const MistralConfig mc{};
  std::vector<int64_t> ids(64);
  std::mt19937_64 g(5);
  for (int64_t& i : ids) i = int64_t(g() % uint64_t(mc.vocab_size));
  const int layers = mc.num_hidden_layers - 1;  // hidden_states[-2]
  Tensor ref, got;
  {
    MistralModel lm = MistralModel::random(mc, kCPU, DType::F32, 11, false);
    ref = lm.forward(ids, layers);
  }
  {
    MistralModel lm = MistralModel::random(mc, kGPU, DType::BF16, 11, false);
    got = down(lm.forward(ids, layers));
  }
  const auto r = tensors_close(got, ref, 5e-2, 0.999);
  std::printf("full-size text encoder, 64 tokens, CUDA bf16 vs CPU f32: %s\n", r.message());
  EXPECT_TRUE(r);
}

TEST(CudaFullSize, DISABLED_DitForward256) {
  ERNIE_REQUIRE_GPU();
  const DitConfig dc{};
  const Tensor x = rnd({1, dc.in_channels, 16, 16}, 21), text = rnd({1, 64, dc.text_in_dim}, 22);
  const std::vector<float> t = {500.f};
  const std::vector<int64_t> lens = {60};  // padded text keys are masked
  Tensor ref, got;
  {
    ErnieDit dit = ErnieDit::random(dc, kCPU, DType::F32, 31);
    ref = dit.forward(x, t, text, lens);
  }
  {
    ErnieDit dit = ErnieDit::random(dc, kGPU, DType::BF16, 31);
    got = down(dit.forward(x, t, text, lens));
  }
  const auto r = tensors_close(got, ref, 5e-2, 0.999);
  std::printf("full-size DiT forward at 256x256, CUDA bf16 vs CPU f32: %s\n", r.message());
  EXPECT_TRUE(r);
}

}  // namespace
}  // namespace ernie::test
