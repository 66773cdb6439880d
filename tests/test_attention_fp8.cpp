// fp8 attention on the CPU (ops.h "fp8 attention"), the reference of the Hopper kernel: the codes
// qkv_norm_rope_fp8 stores stand for qkv_norm_rope's values within e4m3 rounding, and attention_fp8 over
// them tracks fp32 attention (P's e4m3 rounding is its only other error).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <set>

#include "attention_fp8_util.h"
#include "golden.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/ops.h"

namespace ernie::test {
namespace {

TEST(Fp8Attention, KeyOrderIsAPermutationOf32Keys) {
  std::set<int> keys;
  for (int p = 0; p < 32; ++p) keys.insert(ops::fp8_key_order(p));
  EXPECT_EQ(keys.size(), 32u);
  EXPECT_EQ(*keys.begin(), 0);
  EXPECT_EQ(*keys.rbegin(), 31);
  EXPECT_EQ(ops::fp8_key_order(2), 8);  // a thread's 2nd pair of P comes from the next 8-column chunk
}

// S = 300: three tiles, the last partial, S32 = 320 (positions past S hold zeros or keys < S).
TEST(Fp8Attention, InputsAreTheCodesOfQkvNormRope) {
  const int64_t B = 2, S = 300, H = 2;
  Fp8AttentionInputs in = fp8_attention_inputs(B, S, H, 11);
  // Batch row 1's third tile of v all zero: its scale is the smallest normal float.
  for (int64_t s = 256; s < S; ++s)
    std::fill_n(in.qkv.f32() + (S + s) * 3 * H * 128 + 2 * H * 128, H * 128, 0.f);
  const ops::Qkv ref = ops::qkv_norm_rope(in.qkv, H, in.norm_q, in.norm_k, 1e-6f, in.cos, in.sin);
  const ops::Qkv8 got = ops::qkv_norm_rope_fp8(in.qkv, H, in.norm_q, in.norm_k, 1e-6f, in.cos, in.sin);
  ASSERT_EQ(got.vt.shape(), (Shape{B, H, 128, 320}));
  ASSERT_EQ(got.v_scale.shape(), (Shape{B, H, 3}));
  for (int64_t i = 0; i < ref.q.numel(); ++i) {
    ASSERT_EQ(got.q.data<uint8_t>()[i], f32_to_fp8_e4m3(ref.q.f32()[i])) << i;
    ASSERT_EQ(got.k.data<uint8_t>()[i], f32_to_fp8_e4m3(ref.k.f32()[i])) << i;
  }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < 3; ++t) {
        float amax = 0.f;
        for (int64_t s = t * 128; s < std::min(S, t * 128 + 128); ++s)
          for (int64_t c = 0; c < 128; ++c) amax = std::max(amax, std::fabs(ref.v.f32()[((b * S + s) * H + h) * 128 + c]));
        EXPECT_EQ(got.v_scale.f32()[(b * H + h) * 3 + t], amax > 0.f ? amax / 448.f : FLT_MIN);
      }
  EXPECT_EQ(got.v_scale.f32()[(1 * H + 1) * 3 + 2], FLT_MIN);
  // Every value within half an e4m3 step (relative 2^-4, or the subnormal step of the tile's scale).
  const ops::Qkv back = fp8_attention_values(got);
  for (int64_t i = 0; i < ref.v.numel(); ++i) {
    const float want = ref.v.f32()[i], tile_scale = got.v_scale.f32()[0];
    ASSERT_LE(std::fabs(back.v.f32()[i] - want), std::fabs(want) / 16 + tile_scale / 512) << i;
  }
  // Positions past S of the last 32: keys >= S are zero.
  for (int64_t pos = 288; pos < 320; ++pos)
    if (pos / 32 * 32 + ops::fp8_key_order(int(pos % 32)) >= S) {
      for (int64_t c = 0; c < 128; ++c) ASSERT_EQ(got.vt.data<uint8_t>()[c * 320 + pos], 0) << pos;
    }
}

TEST(Fp8Attention, TracksFloatAttention) {
  const int64_t B = 2, S = 300, H = 2;
  const Fp8AttentionInputs in = fp8_attention_inputs(B, S, H, 21);
  const ops::Qkv8 x = ops::qkv_norm_rope_fp8(in.qkv, H, in.norm_q, in.norm_k, 1e-6f, in.cos, in.sin);
  const ops::Qkv f = fp8_attention_values(x);
  const ops::Qkv ref = ops::qkv_norm_rope(in.qkv, H, in.norm_q, in.norm_k, 1e-6f, in.cos, in.sin);
  const float scale = 1.f / std::sqrt(128.f);
  for (const std::vector<int64_t>& kv : {std::vector<int64_t>{}, std::vector<int64_t>{S, 171}}) {
    ops::AttentionMask m;
    m.kv_len = kv;
    const Tensor got = ops::attention_fp8(x, scale, m, DType::F32);
    // The same codes in fp32: only P's rounding differs.
    EXPECT_TRUE(tensors_close(got, ops::attention(f.q, f.k, f.v, scale, m), 0.03, 0.9995));
    // The unquantized values: every rounding.
    EXPECT_TRUE(tensors_close(got, ops::attention(ref.q, ref.k, ref.v, scale, m), 0.08, 0.996));
  }
  // BF16 out: the F32 result rounded.
  EXPECT_TRUE(tensors_close(ops::attention_fp8(x, scale, {}, DType::BF16).to_f32(),
                            ops::attention_fp8(x, scale, {}, DType::F32), 4e-3));
}

TEST(Fp8Attention, RejectsWhatItDoesNotRun) {
  const Fp8AttentionInputs in = fp8_attention_inputs(1, 40, 1, 31);
  const ops::Qkv8 x = ops::qkv_norm_rope_fp8(in.qkv, 1, in.norm_q, in.norm_k, 1e-6f, in.cos, in.sin);
  ops::AttentionMask causal;
  causal.causal = true;
  EXPECT_THROW(ops::attention_fp8(x, 0.1f, causal, DType::F32), Error);
  ops::AttentionMask too_long;
  too_long.kv_len = {41};
  EXPECT_THROW(ops::attention_fp8(x, 0.1f, too_long, DType::F32), Error);
  ops::Qkv8 bad = x;
  bad.vt = Tensor::zeros({1, 1, 128, 40}, DType::F8_E4M3);  // S not rounded up to 32
  EXPECT_THROW(ops::attention_fp8(bad, 0.1f, {}, DType::F32), Error);
  EXPECT_THROW(ops::attention_fp8(x, 0.1f, {}, DType::I8), Error);
  ops::AttentionMask packed;
  packed.segments = {40};
  EXPECT_THROW(ops::attention_fp8(x, 0.1f, packed, DType::F32), Error);  // packed: one Qkv8 per segment
  // Packed segments: batch-1 inputs of one head count, at least one.
  const Fp8AttentionInputs two = fp8_attention_inputs(2, 40, 1, 32), heads2 = fp8_attention_inputs(1, 40, 2, 33);
  const ops::Qkv8 x2 = ops::qkv_norm_rope_fp8(two.qkv, 1, two.norm_q, two.norm_k, 1e-6f, two.cos, two.sin);
  const ops::Qkv8 h2 = ops::qkv_norm_rope_fp8(heads2.qkv, 2, heads2.norm_q, heads2.norm_k, 1e-6f, heads2.cos, heads2.sin);
  EXPECT_THROW(ops::attention_fp8(std::vector<ops::Qkv8>{x, x2}, 0.1f, DType::F32), Error);
  EXPECT_THROW(ops::attention_fp8(std::vector<ops::Qkv8>{x, h2}, 0.1f, DType::F32), Error);
  EXPECT_THROW(ops::attention_fp8(std::vector<ops::Qkv8>{}, 0.1f, DType::F32), Error);
  EXPECT_EQ(ops::attention_fp8(std::vector<ops::Qkv8>{x, x}, 0.1f, DType::F32).shape(), (Shape{1, 80, 1, 128}));
  // head_dim 64
  EXPECT_THROW(ops::qkv_norm_rope_fp8(rnd({1, 40, 3 * 64}, 1), 1, Tensor(), Tensor(), 1e-6f, in.cos, in.sin), Error);
  EXPECT_FALSE(ops::attention_fp8_supported(in.qkv, 64));
  EXPECT_TRUE(ops::attention_fp8_supported(in.qkv, 128));
}

}  // namespace
}  // namespace ernie::test
