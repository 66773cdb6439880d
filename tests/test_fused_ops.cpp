// The fused DiT ops on the CPU: qkv_norm_rope splits a fused projection in the q, k, v order and by head
// exactly as separate projections would be (the CUDA kernels are checked against these in tests/gpu).
#include <gtest/gtest.h>

#include <random>

#include "golden.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/ops.h"

namespace ernie {
namespace {

using test::rnd;

TEST(FusedOps, QkvNormRopeSplitsLikeSeparateProjections) {
  const int64_t B = 2, S = 5, H = 3, D = 8, C = 16;
  Tensor x = rnd({B, S, C}, 1), wq = rnd({H * D, C}, 2), wk = rnd({H * D, C}, 3), wv = rnd({H * D, C}, 4);
  Tensor nq = rnd({D}, 5), nk = rnd({D}, 6), cs = rnd({B, S, D}, 7), sn = rnd({B, S, D}, 8);
  Tensor qkv = ops::linear(x, cpu::concat({wq, wk, wv}, 0));
  ops::Qkv got = ops::qkv_norm_rope(qkv, H, nq, nk, 1e-6f, cs, sn);
  auto heads = [&](const Tensor& w) { return ops::linear(x, w).reshape({B, S, H, D}); };
  EXPECT_TRUE(test::tensors_close(got.q, ops::rope(ops::rms_norm(heads(wq), nq, 1e-6f), cs, sn), 1e-6));
  EXPECT_TRUE(test::tensors_close(got.k, ops::rope(ops::rms_norm(heads(wk), nk, 1e-6f), cs, sn), 1e-6));
  EXPECT_TRUE(test::tensors_close(got.v, heads(wv), 1e-6));
  // Without norms: RoPE only.
  ops::Qkv plain = ops::qkv_norm_rope(qkv, H, Tensor(), Tensor(), 1e-6f, cs, sn);
  EXPECT_TRUE(test::tensors_close(plain.q, ops::rope(heads(wq), cs, sn), 1e-6));
}

TEST(FusedOps, QkvNormRopeRejectsBadShapes) {
  Tensor cs = rnd({1, 5, 8}, 1);
  EXPECT_THROW(ops::qkv_norm_rope(rnd({2, 5, 47}, 2), 2, Tensor(), Tensor(), 1e-6f, cs, cs), Error);
  EXPECT_THROW(ops::qkv_norm_rope(rnd({2, 5, 48}, 2), 0, Tensor(), Tensor(), 1e-6f, cs, cs), Error);
  EXPECT_THROW(ops::qkv_norm_rope(rnd({10, 48}, 2), 2, Tensor(), Tensor(), 1e-6f, cs, cs), Error);
}

}  // namespace
}  // namespace ernie
