// fp8 attention on Hopper (ops.h "fp8 attention"): the CUDA inputs are the CPU twin's codes bit for bit, and
// the wgmma kernel tracks the CPU reference attention_fp8 on the same codes (partial tiles, masks, batches).
#include <cstring>

#include "attention_fp8_util.h"
#include "gpu_util.h"
#include "models/ernie_dit.h"
#include "ops/cpu/cpu_ops.h"

namespace ernie::test {
namespace {

bool hopper() { return have_gpu() && ops::attention_fp8_supported(Tensor::zeros({1}, DType::BF16, kGPU), 128); }

::testing::AssertionResult same_bytes(const Tensor& gpu, const Tensor& want) {
  const Tensor g = gpu.to(kCPU);
  if (g.shape() != want.shape() || g.dtype() != want.dtype())
    return ::testing::AssertionFailure() << shape_str(g.shape()) << " vs " << shape_str(want.shape());
  int64_t differ = 0;
  const auto* a = static_cast<const uint8_t*>(g.raw());
  const auto* b = static_cast<const uint8_t*>(want.raw());
  for (size_t i = 0; i < g.nbytes(); ++i) differ += a[i] != b[i];
  if (differ) return ::testing::AssertionFailure() << differ << " of " << g.nbytes() << " bytes differ";
  return ::testing::AssertionSuccess();
}

// q and k: the CUDA kernel sums the norm in another order, so a code may sit one step off; v's codes and
// scales are computed the same way on both sides and must match exactly.
TEST(CudaAttentionFp8, InputsMatchCpu) {
  ERNIE_REQUIRE_GPU();
  if (!hopper()) GTEST_SKIP() << "fp8 attention needs compute capability 9.0";
  FOR_DTYPES for (int64_t S : {int64_t(300), int64_t(64), int64_t(4296)}) {
    SCOPED_TRACE("S " + std::to_string(S));
    const int64_t B = 2, H = S > 1000 ? 2 : 3;
    Fp8AttentionInputs in = fp8_attention_inputs(B, S, H, 41);
    in.qkv = as_dtype(in.qkv, dt);
    const ops::Qkv8 want = ops::qkv_norm_rope_fp8(in.qkv, H, in.norm_q, in.norm_k, 1e-6f, in.cos, in.sin);
    const ops::Qkv8 got = ops::qkv_norm_rope_fp8(up(in.qkv, dt), H, in.norm_q.to(kGPU), in.norm_k.to(kGPU), 1e-6f,
                                                 in.cos.to(kGPU), in.sin.to(kGPU));
    EXPECT_TRUE(same_bytes(got.vt, want.vt));
    EXPECT_TRUE(same_bytes(got.v_scale, want.v_scale));
    for (const auto& [g, w] : {std::pair{got.q, want.q}, std::pair{got.k, want.k}})
      EXPECT_TRUE(tensors_close(g.to(kCPU).to_f32(), w.to_f32(), 0.01, 0.9999));
  }
}

// The same host codes on both sides; S = 300 (a partial last tile and 32-key group), kv_len masks inside
// the last tile and inside the second, and one long sequence as the DiT runs it.
TEST(CudaAttentionFp8, MatchesCpuTwin) {
  ERNIE_REQUIRE_GPU();
  if (!hopper()) GTEST_SKIP() << "fp8 attention needs compute capability 9.0";
  for (const auto& [S, H, kv] : {std::tuple{int64_t(300), int64_t(3), std::vector<int64_t>{300, 171}},
                                  std::tuple{int64_t(300), int64_t(3), std::vector<int64_t>{}},
                                  std::tuple{int64_t(2100), int64_t(2), std::vector<int64_t>{2100, 1901}}}) {
    SCOPED_TRACE("S " + std::to_string(S));
    const int64_t B = 2;
    const Fp8AttentionInputs in = fp8_attention_inputs(B, S, H, 51);
    const ops::Qkv8 x = ops::qkv_norm_rope_fp8(in.qkv, H, in.norm_q, in.norm_k, 1e-6f, in.cos, in.sin);
    const ops::Qkv8 gx{x.q.to(kGPU), x.k.to(kGPU), x.vt.to(kGPU), x.v_scale.to(kGPU)};
    ops::AttentionMask m;
    m.kv_len = kv;
    const float scale = 1.f / std::sqrt(128.f);
    const Tensor want = ops::attention_fp8(x, scale, m, DType::F32);
    EXPECT_TRUE(tensors_close(down(ops::attention_fp8(gx, scale, m, DType::F32)), want, 0.01, 0.9999));
    EXPECT_TRUE(tensors_close(down(ops::attention_fp8(gx, scale, m, DType::BF16)), want, 0.012, 0.9999));
    // and the bf16 kernel on the values the codes stand for: P's rounding apart, the same attention
    const ops::Qkv f = fp8_attention_values(x);
    const Tensor bf = ops::attention(up(f.q, DType::BF16), up(f.k, DType::BF16), up(f.v, DType::BF16), scale, m);
    EXPECT_TRUE(tensors_close(down(ops::attention_fp8(gx, scale, m, DType::BF16)), down(bf), 0.04, 0.999));
  }
}

// Packed rows: each segment's inputs apart, the CUDA results written one after another into one tensor, as
// the CPU's.
TEST(CudaAttentionFp8, PackedSegmentsMatchCpu) {
  ERNIE_REQUIRE_GPU();
  if (!hopper()) GTEST_SKIP() << "fp8 attention needs compute capability 9.0";
  std::vector<ops::Qkv8> cpu_rows, gpu_rows;
  for (const auto& [S, seed] : {std::pair{int64_t(300), 71u}, std::pair{int64_t(1), 72u}, std::pair{int64_t(129), 73u}}) {
    const Fp8AttentionInputs in = fp8_attention_inputs(1, S, 2, seed);
    const ops::Qkv8 x = ops::qkv_norm_rope_fp8(in.qkv, 2, in.norm_q, in.norm_k, 1e-6f, in.cos, in.sin);
    cpu_rows.push_back(x);
    gpu_rows.push_back({x.q.to(kGPU), x.k.to(kGPU), x.vt.to(kGPU), x.v_scale.to(kGPU)});
  }
  const float scale = 1.f / std::sqrt(128.f);
  const Tensor want = ops::attention_fp8(cpu_rows, scale, DType::F32);
  EXPECT_TRUE(tensors_close(down(ops::attention_fp8(gpu_rows, scale, DType::F32)), want, 0.01, 0.9999));
  EXPECT_TRUE(tensors_close(down(ops::attention_fp8(gpu_rows, scale, DType::BF16)), want, 0.012, 0.9999));
}

// The DiT with head_dim 128 and three blocks (the default policy keeps the first and last bf16): with
// set_attention_fp8 the fp8 middle block runs attention_fp8 (the output moves, a little); an int8 DiT and
// the flag off do not.
TEST(CudaAttentionFp8, DitRunsItInItsFp8Blocks) {
  ERNIE_REQUIRE_GPU();
  if (!hopper()) GTEST_SKIP() << "fp8 attention needs compute capability 9.0";
  DitConfig dc;
  dc.hidden_size = 256, dc.num_attention_heads = 2, dc.num_layers = 3, dc.ffn_hidden_size = 512;
  dc.in_channels = dc.out_channels = 16, dc.text_in_dim = 64;
  const Tensor x = rnd({2, 16, 12, 12}, 61), text = rnd({2, 20, 64}, 62);
  const std::vector<float> t = {500.f, 500.f};
  const std::vector<int64_t> lens = {20, 3};
  ErnieDit dit = ErnieDit::random(dc, kGPU, DType::BF16, 7, false, DType::F8_E4M3);
  const Tensor plain = down(dit.forward(x, t, text, lens));
  EXPECT_FALSE(dit.runs_fp8_attention());
  dit.set_attention_fp8(true);
  EXPECT_TRUE(dit.runs_fp8_attention());
  const Tensor fp8 = down(dit.forward(x, t, text, lens));
  EXPECT_GT(closeness(fp8.to_vector(), plain.to_vector()).max_abs, 0.0);
  EXPECT_TRUE(tensors_close(fp8, plain, 0.1, 0.995));
  // The rows run packed (one fp8 attention per row); kept padded by a layer observer, the same result up
  // to the v tiles' scales (the padded tile holds padding keys too).
  const Tensor fp8_padded = down(dit.forward(x, t, text, lens, [](int, const Tensor&) {}));
  EXPECT_TRUE(tensors_close(fp8, fp8_padded, 0.03, 0.9995));
  ErnieDit int8 = ErnieDit::random(dc, kGPU, DType::BF16, 7, false, DType::I8);
  int8.set_attention_fp8(true);
  EXPECT_FALSE(int8.runs_fp8_attention());
}

}  // namespace
}  // namespace ernie::test
