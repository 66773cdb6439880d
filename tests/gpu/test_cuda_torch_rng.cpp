// torch's CUDA generator drawn on the GPU (ops::torch_cuda_randn, --rng cuda on a CUDA device) against
// torch.randn(generator=torch.Generator("cuda")) from the H200 (tests/data/torch-rng): bit for bit in f32 and
// bf16, small shapes whole and the 1024² latent's head and tail, which the grid-stride layout reaches; and the
// host twin (engine/rng/torch_cuda_rng.h) within its sine's error of it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "engine/noise.h"
#include "engine/rng/torch_cuda_rng.h"
#include "gpu_util.h"
#include "io/safetensors.h"
#include "ops/ops.h"

using namespace ernie;

namespace {

const SafeTensorsFile& rng_golden() {
  static std::shared_ptr<SafeTensorsFile> g = SafeTensorsFile::open(test::data_dir() + "/torch-rng/torch_rng.safetensors");
  return *g;
}
int mismatches(const std::vector<float>& got, const std::vector<float>& want, size_t offset = 0) {
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) bad += std::memcmp(&got[offset + i], &want[i], 4) != 0;
  return bad;
}
const char* dt_name(DType d) { return d == DType::F32 ? "float32" : "bfloat16"; }

}  // namespace

TEST(CudaTorchRng, BitExactOnTheDevice) {
  ERNIE_REQUIRE_GPU();
  const std::vector<std::pair<std::string, Shape>> shapes = {{"1x128x16x16", {1, 128, 16, 16}}, {"2x32x6x5", {2, 32, 6, 5}}};
  for (uint64_t seed : {uint64_t(0), uint64_t(42), uint64_t(123456789)})
    for (DType d : {DType::F32, DType::BF16}) {
      for (const auto& [name, shape] : shapes) {
        const std::string k = "cuda." + std::to_string(seed) + "." + name + "." + dt_name(d);
        const Tensor t = initial_noise(shape, seed, NoiseRng::Cuda, d, test::kGPU);
        EXPECT_TRUE(t.device().is_cuda());
        EXPECT_EQ(t.dtype(), d);
        EXPECT_EQ(t.shape(), shape);
        const std::vector<float> got = t.to(kCPU).to_vector(), want = rng_golden().tensor(k).to_vector();
        ASSERT_EQ(got.size(), want.size()) << k;
        EXPECT_EQ(mismatches(got, want), 0) << k;
      }
      const std::string k = "cuda." + std::to_string(seed) + ".1x128x64x64." + dt_name(d);
      if (!rng_golden().find(k + ".head")) continue;
      const std::vector<float> got =
          initial_noise({1, 128, 64, 64}, seed, NoiseRng::Cuda, d, test::kGPU).to(kCPU).to_vector();
      const std::vector<float> head = rng_golden().tensor(k + ".head").to_vector(),
                               tail = rng_golden().tensor(k + ".tail").to_vector();
      const int bad = mismatches(got, head) + mismatches(got, tail, got.size() - tail.size());
      EXPECT_EQ(bad, 0) << k;
      std::printf("%s: head and tail, %d of %zu values differ\n", k.c_str(), bad, head.size() + tail.size());
      // the host twin: the same stream, its sine within ~2e-6 of the GPU's
      if (d == DType::F32) {
        const std::vector<float> host = torch_cuda_randn(int64_t(got.size()), seed, d);
        double worst = 0;
        for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - host[i]));
        EXPECT_LE(worst, 4e-6) << k;
      }
    }
  test::expect_error([] { ops::torch_cuda_randn(4, 0, DType::F32, kCPU); }, "CUDA device");
  test::expect_error([] { ops::torch_cuda_randn(4, 0, DType::I8, test::kGPU); }, "not f32 or bf16");
}
