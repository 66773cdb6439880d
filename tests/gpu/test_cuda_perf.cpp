// Timings of the hot kernels at the full-size shapes (DISABLED_: run on the GPU machine with
// --gtest_also_run_disabled_tests --gtest_filter='CudaPerf.*'). Prints TFLOP/s or GB/s; asserts nothing
// about speed, only that the result is finite.
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>

#include "gpu_util.h"
#include "models/flux2_vae.h"

namespace ernie::test {
namespace {

template <class F>
double time_s(F&& f, int iters = 10) {
  f();
  cuda::synchronize(0);
  auto t = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) f();
  cuda::synchronize(0);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count() / iters;
}

Tensor gpu_rnd(const Shape& s, uint32_t seed, float scale = 1.f) { return ops::cast(rnd(s, seed, scale).to(kGPU), DType::BF16); }

TEST(CudaPerf, DISABLED_Gemm) {
  ERNIE_REQUIRE_GPU();
  cuda::set_poison_allocations(false);
  for (auto [M, N, K] : {std::tuple{4296, 4096, 4096}, std::tuple{4296, 12288, 4096}, std::tuple{4296, 4096, 12288},
                         std::tuple{8592, 12288, 4096}, std::tuple{8704, 4096, 12288}}) {
    Tensor x = gpu_rnd({M, K}, 1), w = gpu_rnd({N, K}, 2, 0.02f);
    Tensor y;
    const double s = time_s([&] { y = ops::linear(x, w); });
    std::printf("linear bf16 M=%d N=%d K=%d: %.3f ms, %.0f TFLOP/s\n", M, N, K, s * 1e3, 2.0 * M * N * K / s / 1e12);
  }
}

TEST(CudaPerf, DISABLED_Attention) {
  ERNIE_REQUIRE_GPU();
  cuda::set_poison_allocations(false);
  for (int B : {1, 2}) for (const char* path : {"wgmma", "mma"}) {
    setenv("ERNIE_ATTENTION", path, 1);
    const int S = 4296, H = 32, D = 128;
    Tensor q = gpu_rnd({B, S, H, D}, 3), k = gpu_rnd({B, S, H, D}, 4), v = gpu_rnd({B, S, H, D}, 5);
    ops::AttentionMask m;
    m.kv_len = std::vector<int64_t>(size_t(B), S - 50);
    Tensor o;
    const double s = time_s([&] { o = ops::attention(q, k, v, 0.088f, m); });
    std::printf("attention bf16 B=%d S=%d H=%d D=%d (%s): %.3f ms, %.0f TFLOP/s\n", B, S, H, D, path, s * 1e3,
                4.0 * B * H * double(S) * S * D / s / 1e12);
  }
  unsetenv("ERNIE_ATTENTION");
}

// The DiT's attention from its fused projection at 1024² (S 4296, 32 heads): qkv_norm_rope + the bf16
// kernel against qkv_norm_rope_fp8 + the fp8 kernel.
TEST(CudaPerf, DISABLED_AttentionFp8) {
  ERNIE_REQUIRE_GPU();
  cuda::set_poison_allocations(false);
  const int S = 4296, H = 32, D = 128;
  Tensor nq = gpu_rnd({D}, 6), nk = gpu_rnd({D}, 7), cs = rnd({1, S, D}, 8).to(kGPU), sn = rnd({1, S, D}, 9).to(kGPU);
  for (int B : {1, 2}) {
    Tensor qkv = gpu_rnd({B, S, 3 * H * D}, 5);
    ops::AttentionMask m;
    m.kv_len = std::vector<int64_t>(size_t(B), S - 50);
    const double flop = 4.0 * B * H * double(S) * S * D;
    Tensor o;
    ops::Qkv a;
    ops::Qkv8 a8;
    const double prep = time_s([&] { a = ops::qkv_norm_rope(qkv, H, nq, nk, 1e-6f, cs, sn); });
    const double att = time_s([&] { o = ops::attention(a.q, a.k, a.v, 0.088f, m); });
    const double prep8 = time_s([&] { a8 = ops::qkv_norm_rope_fp8(qkv, H, nq, nk, 1e-6f, cs, sn); });
    const double att8 = time_s([&] { o = ops::attention_fp8(a8, 0.088f, m, DType::BF16); });
    std::printf("attention B=%d S=%d: bf16 %.3f ms (%.0f TFLOP/s) + qkv_norm_rope %.3f ms; fp8 %.3f ms (%.0f TFLOP/s) "
                "+ qkv_norm_rope_fp8 %.3f ms\n",
                B, S, att * 1e3, flop / att / 1e12, prep * 1e3, att8 * 1e3, flop / att8 / 1e12, prep8 * 1e3);
  }
}

TEST(CudaPerf, DISABLED_Elementwise) {
  ERNIE_REQUIRE_GPU();
  cuda::set_poison_allocations(false);
  const int S = 4296, C = 4096;
  Tensor x = gpu_rnd({1, S, C}, 6), y = gpu_rnd({1, S, C}, 7), w = gpu_rnd({C}, 8), v = gpu_rnd({1, C}, 9);
  const double bytes = 2.0 * S * C;
  Tensor o;
  double s = time_s([&] { o = ops::rms_norm(x, w, 1e-6f); });
  std::printf("rms_norm [%d, %d]: %.1f us, %.0f GB/s\n", S, C, s * 1e6, 2 * bytes / s / 1e9);
  s = time_s([&] { o = ops::modulate(x, v, v); });
  std::printf("modulate: %.1f us, %.0f GB/s\n", s * 1e6, 2 * bytes / s / 1e9);
  s = time_s([&] { o = ops::gated_residual(x, v, y); });
  std::printf("gated_residual: %.1f us, %.0f GB/s\n", s * 1e6, 3 * bytes / s / 1e9);
  Tensor g = gpu_rnd({1, S, 12288}, 10), u = gpu_rnd({1, S, 12288}, 11);
  s = time_s([&] { o = ops::geglu(g, u); });
  std::printf("geglu [%d, 12288]: %.1f us, %.0f GB/s\n", S, s * 1e6, 3 * 2.0 * S * 12288 / s / 1e9);
  Tensor wq = gpu_rnd({128}, 15), q = gpu_rnd({1, S, 32, 128}, 12), cs = rnd({1, S, 128}, 13).to(kGPU), sn = rnd({1, S, 128}, 14).to(kGPU);
  s = time_s([&] { o = ops::rms_norm(q, wq, 1e-6f); });
  std::printf("qk rms_norm [%d, 32, 128]: %.1f us, %.0f GB/s\n", S, s * 1e6, 2 * bytes / s / 1e9);
  s = time_s([&] { o = ops::rope(q, cs, sn); });
  std::printf("rope: %.1f us, %.0f GB/s\n", s * 1e6, 2 * bytes / s / 1e9);
}

// The prompt enhancer's decode step at batch 1 (Ministral 3B shapes, bf16, a 1,100-token cache): each kernel
// warm and alone, then one layer's chain of them (26 layers and the LM head make a token). GB/s counts the
// weight bytes. Run with and without ERNIE_PDL=0 (programmatic dependent launch off).
TEST(CudaPerf, DISABLED_Decode) {
  ERNIE_REQUIRE_GPU();
  cuda::set_poison_allocations(false);
  const int64_t C = 3072, I = 9216, Hq = 32, Hkv = 8, D = 128, Sk = 1100;
  auto report = [](const char* what, double s, double bytes) {
    std::printf("%-34s %7.2f us, %5.0f GB/s\n", what, s * 1e6, bytes / s / 1e9);
  };
  const char* pdl = std::getenv("ERNIE_PDL");
  std::printf("ERNIE_PDL=%s\n", pdl ? pdl : "");
  Tensor x = gpu_rnd({1, C}, 40), h = gpu_rnd({1, C}, 41), nw = gpu_rnd({C}, 42);
  Tensor wqkv = gpu_rnd({(Hq + 2 * Hkv) * D, C}, 43, 0.02f), wo = gpu_rnd({C, Hq * D}, 44, 0.02f);
  Tensor wgu = gpu_rnd({2 * I, C}, 45, 0.02f), wd = gpu_rnd({C, I}, 46, 0.02f), head = gpu_rnd({131072, C}, 47, 0.02f);
  Tensor q = gpu_rnd({1, 1, Hq, D}, 48), k = gpu_rnd({1, Sk, Hkv, D}, 49), v = gpu_rnd({1, Sk, Hkv, D}, 50);
  Tensor a = gpu_rnd({1, I}, 51), o;
  auto bytes = [](const Tensor& w) { return double(w.nbytes()); };
  const int it = 200;
  report("gemv qkv [6144, 3072]", time_s([&] { o = ops::linear(x, wqkv); }, it), bytes(wqkv));
  report("gemv o [3072, 4096]", time_s([&] { o = ops::linear(q.reshape({1, Hq * D}), wo); }, it), bytes(wo));
  report("linear_swiglu [2x9216, 3072]", time_s([&] { o = ops::linear_swiglu(x, wgu); }, it), bytes(wgu));
  report("gemv down [3072, 9216]", time_s([&] { o = ops::linear(a, wd); }, it), bytes(wd));
  report("gemv lm head [131072, 3072]", time_s([&] { o = ops::linear(x, head); }, 20), bytes(head));
  report("attention decode Sk 1100", time_s([&] { o = ops::attention(q, k, v, 0.088f); }, it), 2 * bytes(k));
  for (int64_t n : {64, 128, 512}) {  // the fixed cost: one chunk (no merge), two, eight
    const std::string what = "attention decode Sk " + std::to_string(n);
    Tensor kn = k.reshape({Sk, Hkv, D}).narrow(0, n).reshape({1, n, Hkv, D});
    Tensor vn = v.reshape({Sk, Hkv, D}).narrow(0, n).reshape({1, n, Hkv, D});
    report(what.c_str(), time_s([&] { o = ops::attention(q, kn, vn, 0.088f); }, it), 2 * bytes(kn));
  }
  report("add_rms_norm [1, 3072]", time_s([&] { o = ops::add_rms_norm(x, h, nw, 1e-5f).normed; }, it), 0);
  // As MistralModel decodes the token at position Sk - 1 (the attention's marginal cost: `attend` false).
  Tensor cs = rnd({1, 1, D}, 52).to(kGPU), sn = rnd({1, 1, D}, 53).to(kGPU);
  auto layer_step = [&](bool attend) {
    ops::SumOut r = ops::add_rms_norm_linear(x, h, nw, 1e-5f, wqkv);
    o = attend ? ops::qkv_rope_attention(r.out.reshape({1, 1, -1}), Hq, Hkv, cs, sn, cs, sn, k, v, Sk - 1, 0.088f)
               : q;
    o = ops::linear(o.reshape({1, Hq * D}), wo);
    o = ops::linear(ops::add_rms_norm_linear(r.sum, o, nw, 1e-5f, wgu, true).out, wd);
  };
  auto chain = [&] { layer_step(true); };
  const double layer = time_s(chain, it);
  report("chain without the attention", time_s([&] { layer_step(false); }, it), 0);
  report("one layer's chain", layer, bytes(wqkv) + bytes(wo) + bytes(wgu) + bytes(wd));
  // The host's share: the time to enqueue the chain (10 times, behind a long kernel so nothing waits).
  o = ops::linear(x, head);
  auto t = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) chain();
  const double enqueue = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count() / 10;
  cuda::synchronize(0);
  std::printf("one layer's chain enqueued in %.2f us (host)\n", enqueue * 1e6);
  std::printf("26 layers + head: %.3f ms/token\n", (26 * layer + time_s([&] { o = ops::linear(x, head); }, 20)) * 1e3);
  EXPECT_TRUE(std::isfinite(down(o).to_vector()[0]));
}

// The DiT's memory-bound row ops at 1024² (4296 tokens, bf16): the fused fp8 producers next to the unfused
// op + quantize they replace, and qkv_norm_rope. GB/s counts the bytes each op must move once.
TEST(CudaPerf, DISABLED_FusedFp8Producers) {
  ERNIE_REQUIRE_GPU();
  cuda::set_poison_allocations(false);
  const double S = 4296, C = 4096, F = 12288;
  Tensor x = gpu_rnd({1, 4296, 4096}, 30), w = gpu_rnd({4096}, 31), v = gpu_rnd({1, 4096}, 32, 0.1f);
  auto report = [](const char* what, double s, double bytes) {
    std::printf("%-34s %7.1f us, %5.0f GB/s\n", what, s * 1e6, bytes / s / 1e9);
  };
  const char* rt = std::getenv("ERNIE_ROW_THREADS");
  std::printf("row blocks: %s (ERNIE_ROW_THREADS)\n", rt ? rt : "the smallest with at most 4 packs per thread");
  Tensor o;
  ops::Weight q;
  report("rms_norm_modulate [4296, 4096]", time_s([&] { o = ops::rms_norm_modulate(x, w, 1e-6f, v, v); }), 4 * S * C);
  report("rms_norm_modulate_fp8", time_s([&] { q = ops::rms_norm_modulate_fp8(x, w, 1e-6f, v, v); }), 3 * S * C);
  report("quantize fp8 [4296, 4096]", time_s([&] { q = ops::quantize(x.reshape({4296, 4096}), DType::F8_E4M3); }),
         3 * S * C);
  Tensor g = gpu_rnd({1, 4296, 12288}, 33), u = gpu_rnd({1, 4296, 12288}, 34);
  report("geglu [4296, 12288]", time_s([&] { o = ops::geglu(g, u); }), 6 * S * F);
  report("geglu_fp8", time_s([&] { q = ops::geglu_fp8(g, u); }), 5 * S * F);
  report("quantize fp8 [4296, 12288]", time_s([&] { q = ops::quantize(g.reshape({4296, 12288}), DType::F8_E4M3); }),
         3 * S * F);
  Tensor qkv = gpu_rnd({1, 4296, 3 * 4096}, 35), nq = gpu_rnd({128}, 36), nk = gpu_rnd({128}, 37);
  Tensor cs = rnd({1, 4296, 128}, 38).to(kGPU), sn = rnd({1, 4296, 128}, 39).to(kGPU);
  ops::Qkv r;
  report("qkv_norm_rope [4296, 3, 32, 128]",
         time_s([&] { r = ops::qkv_norm_rope(qkv, 32, nq, nk, 1e-6f, cs, sn); }), 12 * S * C);
  EXPECT_TRUE(std::isfinite(down(r.q).to_vector()[0]) && std::isfinite(down(o).to_vector()[0]));
}

// The VAE decoder's convolutions, GroupNorms and upsampling at their 1024² shapes in both layouts (NCHW pays
// cuDNN's layout conversions around every convolution; NHWC does not), then one whole 1024² decode
// (released config, random weights) with the decoder in each layout.
TEST(CudaPerf, DISABLED_VaeConvAndGroupNorm) {
  ERNIE_REQUIRE_GPU();
  cuda::set_poison_allocations(false);
  for (ops::Layout lay : {ops::Layout::NCHW, ops::Layout::NHWC}) {
    const bool nhwc = lay == ops::Layout::NHWC;
    const char* ln = nhwc ? "NHWC" : "NCHW";
    for (auto [C, HW] : {std::pair{512, 128}, std::pair{512, 256}, std::pair{256, 512}, std::pair{128, 1024}}) {
      const Shape xs = nhwc ? Shape{1, HW, HW, C} : Shape{1, C, HW, HW};
      Tensor x = gpu_rnd(xs, 20), w = gpu_rnd({C, C, 3, 3}, 21, 0.02f), b = gpu_rnd({C}, 22);
      if (nhwc) w = ops::conv_weight_nhwc(w);
      Tensor o;
      double s = time_s([&] { o = ops::conv2d(x, w, b, 1, 1, lay); }, 5);
      std::printf("%s conv3x3 bf16 C=%d %dx%d: %.3f ms, %.0f TFLOP/s\n", ln, C, HW, HW, s * 1e3,
                  2.0 * C * C * 9 * double(HW) * HW / s / 1e12);
      s = time_s([&] { o = ops::group_norm(x, 32, b, b, 1e-6f, true, lay); }, 5);
      std::printf("%s group_norm+silu C=%d %dx%d: %.3f ms, %.0f GB/s\n", ln, C, HW, HW, s * 1e3,
                  2 * 2.0 * C * double(HW) * HW / s / 1e9);
      if (HW <= 512) {
        s = time_s([&] { o = ops::upsample_nearest2x(x, lay); }, 5);
        std::printf("%s upsample_nearest2x C=%d %dx%d: %.3f ms, %.0f GB/s\n", ln, C, HW, HW, s * 1e3,
                    5 * 2.0 * C * double(HW) * HW / s / 1e9);
      }
    }
  }
  for (ops::Layout lay : {ops::Layout::NCHW, ops::Layout::NHWC}) {
    const Flux2Vae vae = Flux2Vae::random(VaeConfig{}, kGPU, DType::BF16, 7, lay);
    const Tensor z = rnd({1, vae.config().latent_channels, 128, 128}, 23).to(kGPU);
    Tensor img;
    const double s = time_s([&] { img = vae.decode(z); }, 5);
    std::printf("VAE decode 1024x1024 bf16, decoder %s: %.2f ms\n", lay == ops::Layout::NHWC ? "NHWC" : "NCHW",
                s * 1e3);
    EXPECT_TRUE(std::isfinite(down(img).to_vector()[0]));
  }
}

}  // namespace
}  // namespace ernie::test
