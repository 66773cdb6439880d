// torch.randn's generators reproduced on the host (tests/data/torch-rng, made with torch on CPU and an H200):
// the CPU generator bit for bit in f32 and bf16, the CUDA generator's Philox stream and layout; and the batch
// rule (diffusers draws a request's whole [B, ...] batch from one generator).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "engine/noise.h"
#include "engine/request.h"
#include "engine/rng/torch_cpu_rng.h"
#include "engine/rng/torch_cuda_rng.h"
#include "golden.h"
#include "io/safetensors.h"

using namespace ernie;

namespace {

const SafeTensorsFile& rng_golden() {
  static std::shared_ptr<SafeTensorsFile> g = SafeTensorsFile::open(test::data_dir() + "/torch-rng/torch_rng.safetensors");
  return *g;
}
std::vector<float> golden(const std::string& k) { return rng_golden().tensor(k).to_vector(); }

// Bitwise mismatches between got[offset + i] and want[i].
int mismatches(const std::vector<float>& got, const std::vector<float>& want, size_t offset = 0) {
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) bad += std::memcmp(&got[offset + i], &want[i], 4) != 0;
  return bad;
}

struct Shp {
  const char* name;
  Shape shape;
};
const Shp kSmall[] = {{"1x128x16x16", {1, 128, 16, 16}}, {"2x32x6x5", {2, 32, 6, 5}}};
const uint64_t kSeeds[] = {0, 42, 123456789};
const char* dt_name(DType d) { return d == DType::F32 ? "float32" : "bfloat16"; }

}  // namespace

TEST(TorchCpuRng, BitExact) {
  for (uint64_t seed : kSeeds)
    for (DType d : {DType::F32, DType::BF16}) {
      for (const Shp& s : kSmall) {
        const std::string k = "cpu." + std::to_string(seed) + "." + s.name + "." + dt_name(d);
        std::vector<float> got = initial_noise(s.shape, seed, NoiseRng::Cpu, d).to_vector();
        ASSERT_EQ(got.size(), golden(k).size()) << k;
        EXPECT_EQ(mismatches(got, golden(k)), 0) << k;
      }
      // 1x128x64x64 (a 1024² image's latents): head and tail 512 values and the moments.
      const std::string k = "cpu." + std::to_string(seed) + ".1x128x64x64." + dt_name(d);
      std::vector<float> got = torch_cpu_randn(128 * 64 * 64, seed, d);
      EXPECT_EQ(mismatches(got, golden(k + ".head")), 0) << k;
      EXPECT_EQ(mismatches(got, golden(k + ".tail"), got.size() - 512), 0) << k;
      double sum = 0, sq = 0;
      for (float v : got) sum += v;
      const double mean = sum / double(got.size());
      for (float v : got) sq += (v - mean) * (v - mean);
      const std::vector<float> mom = golden(k + ".moments");
      EXPECT_NEAR(mean, mom[0], 1e-6) << k;
      EXPECT_NEAR(std::sqrt(sq / double(got.size() - 1)), mom[1], 1e-5) << k;
    }
}

// Fewer than 16 values take torch's scalar path: torch.manual_seed(0); torch.randn(4) is the well-known
// [1.5410, -0.2934, -2.1788, 0.5684]; a size not a multiple of 16 redraws its last 16.
TEST(TorchCpuRng, ScalarPathAndTail) {
  std::vector<float> s = torch_cpu_randn(4, 0, DType::F32);
  const float want[4] = {1.5410f, -0.2934f, -2.1788f, 0.5684f};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(s[size_t(i)], want[i], 1e-4) << i;
  std::vector<float> a = torch_cpu_randn(32, 7, DType::F32), b = torch_cpu_randn(40, 7, DType::F32);
  EXPECT_EQ(mismatches(b, std::vector<float>(a.begin(), a.begin() + 16)), 0);  // the first chunk is shared
  EXPECT_NE(mismatches(b, std::vector<float>(a.begin() + 16, a.end()), 16), 0);  // the redrawn tail differs
  // only the low 32 bits of the seed reach the mt19937
  EXPECT_EQ(torch_cpu_randn(20, 5, DType::F32), torch_cpu_randn(20, 5 + (uint64_t(1) << 32), DType::F32));
}

// The CUDA generator: Philox4x32-10 streams in torch's grid-stride layout. The H200's __sincosf (the GPU's
// fast sine and cosine) is not reproduced on the host bit for bit: the values agree within 4e-6 (the
// hardware's error), which a wrong stream, order or layout would miss by far.
TEST(TorchCudaRng, StreamAndLayout) {
  for (uint64_t seed : kSeeds) {
    for (const Shp& s : kSmall)
      for (DType d : {DType::F32, DType::BF16}) {
        const std::string k = "cuda." + std::to_string(seed) + "." + s.name + "." + dt_name(d);
        std::vector<float> got = initial_noise(s.shape, seed, NoiseRng::Cuda, d).to_vector(), want = golden(k);
        ASSERT_EQ(got.size(), want.size());
        double m = 0;  // f32: the largest difference; bf16: in units of the value's bf16 step (or of 4e-6)
        int bad = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          const double diff = std::fabs(double(got[i]) - double(want[i]));
          m = std::max(m, d == DType::F32 ? diff : diff / std::max(std::fabs(double(want[i])) / 128.0, 4e-6));
          bad += got[i] != want[i];
        }
        EXPECT_LE(m, d == DType::F32 ? 4e-6 : 1.0) << k;
        if (d == DType::BF16) { EXPECT_LE(bad, int(got.size() / 1000)) << k; }  // rounding flips only
      }
    const std::string k = "cuda." + std::to_string(seed) + ".1x128x64x64.float32";
    std::vector<float> got = torch_cuda_randn(128 * 64 * 64, seed, DType::F32);
    std::vector<float> head = golden(k + ".head"), tail = golden(k + ".tail");
    for (size_t i = 0; i < 512; ++i) {
      EXPECT_NEAR(got[i], head[i], 4e-6) << k << " " << i;
      EXPECT_NEAR(got[got.size() - 512 + i], tail[i], 4e-6) << k << " " << i;
    }
  }
}

// Philox4x32-10 known-answer vectors (Random123's kat_vectors).
TEST(TorchCudaRng, PhiloxKnownAnswers) {
  uint32_t out[4];
  const uint32_t c0[4] = {0, 0, 0, 0}, k0[2] = {0, 0};
  philox4x32_10(c0, k0, out);
  EXPECT_EQ(out[0], 0x6627e8d5u);
  EXPECT_EQ(out[1], 0xe169c58du);
  EXPECT_EQ(out[2], 0xbc57ac4cu);
  EXPECT_EQ(out[3], 0x9b00dbd8u);
  const uint32_t c1[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, k1[2] = {0xffffffffu, 0xffffffffu};
  philox4x32_10(c1, k1, out);
  EXPECT_EQ(out[0], 0x408f276du);
  EXPECT_EQ(out[1], 0x41c83b0eu);
  EXPECT_EQ(out[2], 0xa20bc7c6u);
  EXPECT_EQ(out[3], 0x6d5451fdu);
}

// diffusers' randn_tensor draws a request's [B, ...] batch from one generator: the golden 2x32x6x5 tensor is
// one draw, so image 1 is not what seed + 1 gives alone, nor image 0's seed for a [1, ...] draw beyond it.
// The ernie generator keeps its rule: image b is drawn from seed + b.
TEST(NoiseBatchRule, TorchDrawsTheBatchAtOnceErnieUsesSeedPlusB) {
  const Shape one = {1, 32, 6, 5}, two = {2, 32, 6, 5};
  for (NoiseRng g : {NoiseRng::Cpu, NoiseRng::Cuda}) {
    std::vector<float> batch = initial_noise(two, 42, g).to_vector();
    std::vector<float> alone1 = initial_noise(one, 43, g).to_vector();
    EXPECT_NE(std::vector<float>(batch.begin() + 960, batch.end()), alone1) << rng_name(g);
    EXPECT_EQ(image_seed(42, 1, g), 42u);
  }
  std::vector<float> batch = initial_noise(two, 42, NoiseRng::Ernie).to_vector();
  EXPECT_EQ(std::vector<float>(batch.begin() + 960, batch.end()), initial_noise(one, 43, NoiseRng::Ernie).to_vector());
  EXPECT_EQ(image_seed(42, 1, NoiseRng::Ernie), 43u);
}

TEST(NoiseBatchRule, ParseRng) {
  EXPECT_EQ(parse_rng("cpu"), NoiseRng::Cpu);
  EXPECT_EQ(parse_rng("cuda"), NoiseRng::Cuda);
  EXPECT_EQ(parse_rng("ernie"), NoiseRng::Ernie);
  test::expect_error([] { parse_rng("philox"); }, "choose one of cpu");
  EXPECT_EQ(GenerateRequest{}.rng, NoiseRng::Cpu);  // the default, as ComfyUI
}
