// ErnieDit: one forward against the diffusers reference (golden dit.*), the padding mask, bad inputs, and
// the random-weight builder. The full-size CPU timing is DISABLED_ (run it by hand; see bench/BENCHMARKS.md).
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "golden.h"
#include "models/ernie_dit.h"
#include "ops/ops.h"

namespace ernie {
namespace {

using test::golden_ids;
using test::golden_tensor;
using test::kCpuRelL2;
using test::tensors_close;

const ErnieDit& tiny_dit() {
  static ErnieDit d = ErnieDit::load(ModelFolder::open(test::tiny_model(), false), kCPU, DType::F32);
  return d;
}

using test::DitInputs;
DitInputs golden_inputs() { return test::dit_inputs(); }

using test::expect_error;

TEST(Dit, MatchesReferenceForward) {
  DitInputs in = golden_inputs();
  ASSERT_EQ(in.text_lens.size(), 2u);
  ASSERT_NE(in.text_lens[0], in.text_lens[1]) << "golden case should exercise two different text lengths";
  Tensor out = tiny_dit().forward(in.x, in.t, in.text, in.text_lens);
  auto close = tensors_close(out, golden_tensor("dit.out"), kCpuRelL2);
  EXPECT_TRUE(close);
  std::printf("dit.out: %s\n", close.message());
}

// Text past text_lens is masked out of attention: changing it must not change the output, while changing
// a valid text token must.
TEST(Dit, PaddedTextIsMasked) {
  DitInputs in = golden_inputs();
  const int64_t T = in.text.dim(1), C = in.text.dim(2);
  Tensor base = tiny_dit().forward(in.x, in.t, in.text, in.text_lens);
  Tensor noisy = in.text.clone(), changed = in.text.clone();
  for (int64_t b = 0; b < in.text.dim(0); ++b) {
    for (int64_t s = in.text_lens[size_t(b)]; s < T; ++s)
      for (int64_t c = 0; c < C; ++c) noisy.f32()[(b * T + s) * C + c] = 3.0f + 0.1f * float(c);
    ASSERT_GT(in.text_lens[size_t(b)], 0);
    changed.f32()[(b * T + 0) * C + 0] += 5.0f;
  }
  EXPECT_TRUE(tensors_close(tiny_dit().forward(in.x, in.t, noisy, in.text_lens), base, 1e-7));
  EXPECT_FALSE(tensors_close(tiny_dit().forward(in.x, in.t, changed, in.text_lens), base, 1e-5));
}

// Rows at one timestep with different text lengths run packed (no padding rows; attention block-diagonal);
// a layer observer keeps them padded. Both give the same output, the padding never read.
TEST(Dit, PackedRowsMatchPaddedRows) {
  DitInputs in = golden_inputs();
  ASSERT_NE(in.text_lens[0], in.text_lens[1]);
  const std::vector<float> t(2, in.t[0]);
  int layers = 0;
  Tensor padded = tiny_dit().forward(in.x, t, in.text, in.text_lens, [&](int, const Tensor& h) {
    EXPECT_EQ(h.dim(0), 2);  // the observer sees [B, S, hidden]
    ++layers;
  });
  EXPECT_GT(layers, 0);
  Tensor packed = tiny_dit().forward(in.x, t, in.text, in.text_lens);
  EXPECT_TRUE(tensors_close(packed, padded, 1e-6));
  // Each row as it is alone.
  for (int64_t b = 0; b < 2; ++b) {
    const int64_t len = in.text_lens[size_t(b)];
    Tensor text = ops::slice(in.text.narrow(b, 1), 1, 0, len);
    Tensor alone = tiny_dit().forward(in.x.narrow(b, 1), {t[0]}, text, {len});
    EXPECT_TRUE(tensors_close(packed.narrow(b, 1), alone, 1e-6)) << "row " << b;
  }
}

TEST(Dit, BadInputsGiveClearErrors) {
  DitInputs in = golden_inputs();
  const ErnieDit& d = tiny_dit();
  Tensor wrong_channels = Tensor::zeros({2, 31, 6, 5}, DType::F32);
  expect_error([&] { d.forward(wrong_channels, in.t, in.text, in.text_lens); }, "31 channels");
  expect_error([&] { d.forward(in.x, in.t, in.text, {in.text_lens[0], 8}); }, "text_lens[1] = 8");
  expect_error([&] { d.forward(in.x, in.t, in.text, {-1, 2}); }, "text_lens[0] = -1");
  expect_error([&] { d.forward(in.x, {500.f}, in.text, in.text_lens); }, "1 timesteps for a batch of 2");
  expect_error([&] { d.forward(in.x, {500.f, NAN}, in.text, in.text_lens); }, "not finite");
  expect_error([&] { d.forward(in.x, in.t, Tensor::zeros({2, 7, 40}, DType::F32), in.text_lens); }, "text_in_dim 48");
  expect_error([&] { d.forward(in.x.reshape({2, 32, 30}), in.t, in.text, in.text_lens); }, "[B, C, H, W]");
  expect_error([&] { d.forward(in.x, in.t, in.text, {1}); }, "1 text_lens");
  expect_error([] { ErnieDit::load(ModelFolder::open(test::tiny_model(), false), kCPU, DType::BF16); }, "F32");
}

TEST(Dit, RandomWeightsAreDeterministic) {
  DitConfig cfg = tiny_dit().config();
  ErnieDit a = ErnieDit::random(cfg, kCPU, DType::F32, 7), b = ErnieDit::random(cfg, kCPU, DType::F32, 7),
           c = ErnieDit::random(cfg, kCPU, DType::F32, 8);
  EXPECT_EQ(a.weight_bytes(), tiny_dit().weight_bytes());
  DitInputs in = golden_inputs();
  Tensor ya = a.forward(in.x, in.t, in.text, in.text_lens);
  EXPECT_TRUE(tensors_close(b.forward(in.x, in.t, in.text, in.text_lens), ya, 0.0));
  EXPECT_FALSE(tensors_close(c.forward(in.x, in.t, in.text, in.text_lens), ya, 1e-3));
}

// Full-size (released config) forward at 256×256: 16×16 latent tokens + 64 text tokens, batch 1.
// ./build/tests/ernie_tests --gtest_also_run_disabled_tests --gtest_filter=Dit.DISABLED_FullSizeCpuForward
TEST(Dit, DISABLED_FullSizeCpuForward) {
  using clock = std::chrono::steady_clock;
  DitConfig cfg;  // released sizes
  auto t0 = clock::now();
  ErnieDit d = ErnieDit::random(cfg, kCPU, DType::F32, 1);
  double build_s = std::chrono::duration<double>(clock::now() - t0).count();
  Tensor x = Tensor::zeros({1, cfg.in_channels, 16, 16}, DType::F32);
  Tensor text = Tensor::zeros({1, 64, cfg.text_in_dim}, DType::F32);
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = float((i * 7919) % 200 - 100) / 100.0f;
  for (int64_t i = 0; i < text.numel(); ++i) text.f32()[i] = float((i * 104729) % 200 - 100) / 100.0f;
  auto cpu_s = [] {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + 1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  };
  double load1 = 0;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load1) != 1) load1 = -1;
    std::fclose(f);
  }
  const double cpu0 = cpu_s();
  t0 = clock::now();
  Tensor out = d.forward(x, {500.f}, text, {64});
  double fwd_s = std::chrono::duration<double>(clock::now() - t0).count();
  const double fwd_cpu_s = cpu_s() - cpu0;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  // GEMM FLOPs of the 36 blocks (q, k, v, out, gate, up, fc2) over all 320 tokens.
  const double S = 256 + 64, Hd = cfg.hidden_size, F = cfg.ffn_hidden_size;
  const double gflop = cfg.num_layers * S * 2 * (4 * Hd * Hd + 3 * Hd * F) / 1e9;
  std::printf("{\"bench\":\"dit_forward_cpu\",\"image_tokens\":256,\"text_tokens\":64,\"weights_gib\":%.2f,"
              "\"build_s\":%.1f,\"forward_s\":%.2f,\"forward_cpu_s\":%.2f,\"block_gemm_gflop\":%.0f,"
              "\"gflops\":%.1f,\"peak_rss_gib\":%.2f,\"loadavg_1m_at_start\":%.2f}\n",
              double(d.weight_bytes()) / (1 << 30), build_s, fwd_s, fwd_cpu_s, gflop, gflop / fwd_s,
              double(ru.ru_maxrss) / (1 << 20), load1);
  EXPECT_EQ(out.shape(), (Shape{1, cfg.out_channels, 16, 16}));
  for (float v : out.to_vector()) ASSERT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace ernie
