// The channels-last (Layout::NHWC) forms of conv2d, group_norm and upsample_nearest2x on the CPU against
// their NCHW forms through permutes: the NHWC op on permute(x) equals permute(NCHW op on x). The NCHW ops
// are tested against naive loops in test_ops_cpu.cpp.
#include <gtest/gtest.h>

#include "golden.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/ops.h"

using namespace ernie;
using ernie::test::rnd;
using ernie::test::tensors_close;
using ops::Layout;

namespace {

Tensor nhwc(const Tensor& x) { return ops::permute(x, {0, 2, 3, 1}); }
Tensor nchw(const Tensor& x) { return ops::permute(x, {0, 3, 1, 2}); }

TEST(OpsNhwc, Conv2dMatchesNchw) {
  struct Case {
    Shape x, w;
    int stride, pad;
  };
  const Case cases[] = {{{2, 8, 17, 19}, {12, 8, 3, 3}, 1, 1}, {{1, 6, 16, 16}, {8, 6, 3, 3}, 2, 0},
                        {{2, 16, 9, 9}, {4, 16, 1, 1}, 1, 0},  {{1, 5, 7, 6}, {3, 5, 3, 3}, 1, 1},
                        {{1, 3, 12, 10}, {7, 3, 3, 3}, 2, 1},  {{1, 4, 3, 3}, {2, 4, 3, 3}, 1, 2}};
  for (const Case& c : cases) {
    SCOPED_TRACE("x " + shape_str(c.x) + " w " + shape_str(c.w));
    const Tensor x = rnd(c.x, 1), w = rnd(c.w, 2, 0.3f), b = rnd({c.w[0]}, 3);
    const Tensor ref = cpu::conv2d(x, w, b, c.stride, c.pad);
    const Tensor got = cpu::conv2d(nhwc(x), ops::conv_weight_nhwc(w), b, c.stride, c.pad, Layout::NHWC);
    ASSERT_EQ(got.shape(), nhwc(ref).shape());
    EXPECT_TRUE(tensors_close(nchw(got), ref, 1e-6));
    // Without a bias, and through the op set's dispatcher.
    EXPECT_TRUE(tensors_close(nchw(ops::conv2d(nhwc(x), ops::conv_weight_nhwc(w), {}, c.stride, c.pad, Layout::NHWC)),
                              cpu::conv2d(x, w, {}, c.stride, c.pad), 1e-6));
  }
  // A BF16 weight (the checkpoint's dtype) is converted on the fly, as in NCHW.
  const Tensor x = rnd({1, 8, 6, 5}, 4), w = rnd({4, 8, 3, 3}, 5, 0.3f).cast(DType::BF16);
  EXPECT_TRUE(tensors_close(nchw(cpu::conv2d(nhwc(x), ops::conv_weight_nhwc(w), {}, 1, 1, Layout::NHWC)),
                            cpu::conv2d(x, w, {}, 1, 1), 1e-6));
}

TEST(OpsNhwc, GroupNormMatchesNchw) {
  struct Case {
    Shape s;
    int groups;
  };
  for (const Case& c : {Case{{2, 8, 5, 7}, 4}, Case{{1, 64, 12, 10}, 32}, Case{{2, 6, 3, 3}, 3}, Case{{1, 4, 1, 1}, 1}}) {
    SCOPED_TRACE(shape_str(c.s));
    const int64_t C = c.s[1];
    const Tensor x = rnd(c.s, 6, 3.f, 1.5f), w = rnd({C}, 7), b = rnd({C}, 8);
    for (bool silu : {false, true}) {
      EXPECT_TRUE(tensors_close(nchw(cpu::group_norm(nhwc(x), c.groups, w, b, 1e-6f, silu, Layout::NHWC)),
                                cpu::group_norm(x, c.groups, w, b, 1e-6f, silu), 1e-6));
      EXPECT_TRUE(tensors_close(nchw(ops::group_norm(nhwc(x), c.groups, {}, {}, 1e-5f, silu, Layout::NHWC)),
                                cpu::group_norm(x, c.groups, {}, {}, 1e-5f, silu), 1e-6));
    }
  }
  // Channels-last tokens [B, S, C] (the VAE attention's input) are [B, C, S] for NCHW.
  const Tensor t = rnd({2, 9, 16}, 9), w = rnd({16}, 10), b = rnd({16}, 11);
  EXPECT_TRUE(tensors_close(ops::permute(cpu::group_norm(t, 4, w, b, 1e-6f, false, Layout::NHWC), {0, 2, 1}),
                            cpu::group_norm(ops::permute(t, {0, 2, 1}), 4, w, b, 1e-6f, false), 1e-6));
}

TEST(OpsNhwc, UpsampleMatchesNchw) {
  for (const Shape& s : {Shape{2, 3, 4, 5}, Shape{1, 16, 3, 2}}) {
    const Tensor x = rnd(s, 12);
    EXPECT_TRUE(tensors_close(nchw(cpu::upsample_nearest2x(nhwc(x), Layout::NHWC)), cpu::upsample_nearest2x(x), 0));
    EXPECT_TRUE(tensors_close(nchw(ops::upsample_nearest2x(nhwc(x), Layout::NHWC)), cpu::upsample_nearest2x(x), 0));
  }
}

TEST(OpsNhwc, BadShapesNameTheLayout) {
  using ernie::test::expect_error;
  // Channels are the last dim: an NCHW weight does not fit an NHWC input.
  expect_error([] { cpu::conv2d(rnd({1, 5, 5, 4}, 1), rnd({2, 4, 3, 3}, 2), {}, 1, 1, Layout::NHWC); },
               "weight [2, 4, 3, 3] [O, kh, kw, I] do not match");
  expect_error([] { cpu::group_norm(rnd({1, 2, 2, 6}, 1), 4, {}, {}, 1e-5f, false, Layout::NHWC); },
               "group_norm: 6 channels");
  expect_error([] { cpu::upsample_nearest2x(rnd({2, 3, 4}, 1), Layout::NHWC); }, "is not [B, H, W, C]");
  expect_error([] { ops::conv_weight_nhwc(rnd({2, 3, 4}, 1)); }, "conv_weight_nhwc: weight [2, 3, 4] is not [O, I, kh, kw]");
}

}  // namespace
