// Full size, the same random weights on both backends: CUDA bf16 against the CPU fp32 reference for the
// text encoder on a 64-token prompt and one DiT forward at 256x256 (256 image + 64 text tokens): cosine
// >= 0.999 (issue 5). Relative L2 is bounded at 5e-2, looser than the tiny fixture's 3e-2: bf16 rounding
// compounds over 25 / 36 full-width layers (measured on the H200: 3.2e-2 and 3.3e-2). Minutes of CPU work and ~16 GB of host memory: DISABLED_, run on the GPU machine with
// --gtest_also_run_disabled_tests --gtest_filter='CudaFullSize.*'.
#include <cstdio>
#include <random>

#include "gpu_util.h"
#include "models/ernie_dit.h"
#include "models/quant_policy.h"
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

// One DiT forward's inputs at 1024² (4096 image + 200 text tokens, 190 of them valid), full size.
struct Inputs1024 {
  DitConfig dc{};
  Tensor x = rnd({1, dc.in_channels, 64, 64}, 41), text = rnd({1, 200, dc.text_in_dim}, 42);
  std::vector<float> t = {500.f};
  std::vector<int64_t> lens = {190};
};

// Quantized weights against bf16, the same random full-size weights, one DiT forward at 1024² (4096 image +
// 200 text tokens), default policy (first/last blocks and the non-block layers stay bf16): the issue's
// targets, fp8 cosine >= 0.995 and rel L2 <= 0.1, int8 cosine >= 0.999; and the per-block table (hidden
// states after each block against bf16's) for the issue note. Random weights are a proxy for the real ones.
TEST(CudaFullSize, DISABLED_DitQuantized1024) {
  ERNIE_REQUIRE_GPU();
  const Inputs1024 in;
  const DitConfig& dc = in.dc;
  std::vector<Tensor> ref_layers;
  Tensor ref;
  {
    ErnieDit dit = ErnieDit::random(dc, kGPU, DType::BF16, 51);
    ref = down(dit.forward(in.x, in.t, in.text, in.lens, [&](int, const Tensor& h) { ref_layers.push_back(h); }));
  }
  std::vector<std::vector<Closeness>> table(size_t(dc.num_layers));
  for (DType qt : {DType::F8_E4M3, DType::I8}) {
    ErnieDit dit = ErnieDit::random(dc, kGPU, DType::BF16, 51, false, qt);
    Tensor got = down(dit.forward(in.x, in.t, in.text, in.lens, [&](int l, const Tensor& h) {
      table[size_t(l)].push_back(closeness(down(h).to_vector(), down(ref_layers[size_t(l)]).to_vector()));
    }));
    const bool fp8 = qt == DType::F8_E4M3;
    const auto r = tensors_close(got, ref, fp8 ? 0.1 : 0.05, fp8 ? 0.995 : 0.999);
    std::printf("full-size DiT forward at 1024x1024, %s weights vs bf16: %s (weights %.2f GiB)\n", dtype_name(qt),
                r.message(), double(dit.weight_bytes()) / double(1ull << 30));
    EXPECT_TRUE(r);
  }
  std::printf("per-block hidden states vs bf16 | fp8 cosine | fp8 rel L2 | int8 cosine | int8 rel L2\n");
  for (size_t l = 0; l < table.size(); ++l)
    std::printf("block %2zu | %.6f | %.4f | %.6f | %.4f\n", l, table[l][0].cosine, table[l][0].rel_l2,
                table[l][1].cosine, table[l][1].rel_l2);
}

// Where fp8's error comes from (for the issue note, no bound): the same forward with some fp8 linears kept
// bf16 by the policy's keep list: the attention's q/k/v projections (their error moves the softmax's
// logits), to_out, the MLP (all of it, gate/up, linear_fc2). H200: the MLP carries nearly all of it.
TEST(CudaFullSize, DISABLED_DitFp8ErrorSources) {
  ERNIE_REQUIRE_GPU();
  const Inputs1024 in;
  const DitConfig& dc = in.dc;
  const Tensor ref = down(ErnieDit::random(dc, kGPU, DType::BF16, 51).forward(in.x, in.t, in.text, in.lens));
  const std::pair<const char*, std::vector<std::string>> variants[] = {
      {"default policy", {}},
      {"q/k/v kept bf16", {"self_attention.to_q.", "self_attention.to_k.", "self_attention.to_v."}},
      {"q/k kept bf16", {"self_attention.to_q.", "self_attention.to_k."}},
      {"to_out kept bf16", {"self_attention.to_out."}},
      {"mlp kept bf16", {"mlp."}},
      {"gate/up kept bf16", {"mlp.gate_proj.", "mlp.up_proj."}},
      {"linear_fc2 kept bf16", {"mlp.linear_fc2."}}};
  for (const auto& [what, keep] : variants) {
    QuantPolicy p;
    for (const std::string& k : keep) p.keep.push_back(k);
    const ErnieDit dit = ErnieDit::random(dc, kGPU, DType::BF16, 51, false, DType::F8_E4M3, p);
    const Closeness c = closeness(down(dit.forward(in.x, in.t, in.text, in.lens)).to_vector(), ref.to_vector());
    std::printf("full-size DiT at 1024x1024, fp8 with %s vs bf16: cosine %.6f, rel L2 %.4f\n", what, c.cosine, c.rel_l2);
  }
  // fp8 attention, by the default policy and with every block fp8 (convert --quantize-all-blocks)
  for (bool all_blocks : {false, true}) {
    QuantPolicy p;
    p.keep_first_last_dit_blocks = !all_blocks;
    ErnieDit dit = ErnieDit::random(dc, kGPU, DType::BF16, 51, false, DType::F8_E4M3, p);
    dit.set_attention_fp8(true);
    const Closeness c = closeness(down(dit.forward(in.x, in.t, in.text, in.lens)).to_vector(), ref.to_vector());
    std::printf("full-size DiT at 1024x1024, fp8 with %s and fp8 attention vs bf16: cosine %.6f, rel L2 %.4f\n",
                all_blocks ? "every block quantized" : "the default policy", c.cosine, c.rel_l2);
  }
}

// The text encoder's projections 8-bit (weight-only, as --quantize and an 8-bit file run them) against
// bf16, the same random full-size weights, a 200-token prompt: the conditioning the DiT reads. The policy
// makes them int8 (QuantPolicy::text_models_int8) because fp8 strays further: int8 is held to the issue's
// fp8 bounds for the DiT (cosine >= 0.995, rel L2 <= 0.1; H200: 0.9976 / 0.069), fp8 only reported
// (0.952 / 0.31) and required to be the worse.
TEST(CudaFullSize, DISABLED_TextEncoderQuantized) {
  ERNIE_REQUIRE_GPU();
  const MistralConfig mc{};
  std::vector<int64_t> ids(200);
  std::mt19937_64 g(6);
  for (int64_t& i : ids) i = int64_t(g() % uint64_t(mc.vocab_size));
  const int layers = mc.num_hidden_layers - 1;
  std::vector<float> ref;
  size_t bf16_bytes = 0;
  {
    MistralModel lm = MistralModel::random(mc, kGPU, DType::BF16, 11, false);
    ref = down(lm.forward(ids, layers)).to_vector();
    bf16_bytes = lm.weight_bytes();
  }
  std::vector<Closeness> c;
  for (DType qt : {DType::I8, DType::F8_E4M3}) {
    MistralModel lm = MistralModel::random(mc, kGPU, DType::BF16, 11, false, qt);
    c.push_back(closeness(down(lm.forward(ids, layers)).to_vector(), ref));
    std::printf("full-size text encoder, 200 tokens, %s weights (weight-only) vs bf16: cosine %.6f, rel L2 %.4f "
                "(weights %.2f GiB, bf16 %.2f GiB)\n", dtype_name(qt), c.back().cosine, c.back().rel_l2,
                double(lm.weight_bytes()) / double(1ull << 30), double(bf16_bytes) / double(1ull << 30));
  }
  EXPECT_GE(c[0].cosine, 0.995);
  EXPECT_LE(c[0].rel_l2, 0.1);
  EXPECT_GT(c[0].cosine, c[1].cosine);
}

}  // namespace
}  // namespace ernie::test
