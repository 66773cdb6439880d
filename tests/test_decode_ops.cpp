// The decode-step fused ops on the CPU: add_rms_norm, qkv_rope (GQA split of a stacked q|k|v projection,
// written into caller tensors such as KV-cache rows) and linear_swiglu (a stacked gate|up projection) equal
// the separate ops they replace; argmax (greedy decoding's next id) takes the first of ties like torch (the
// CUDA kernels are checked against these in tests/gpu).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "golden.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/ops.h"

namespace ernie {
namespace {

using test::rnd;

TEST(DecodeOps, AddRmsNormIsAddThenRmsNorm) {
  Tensor x = rnd({3, 7}, 1), y = rnd({3, 7}, 2), w = rnd({7}, 3);
  ops::SumNorm r = ops::add_rms_norm(x, y, w, 1e-5f);
  EXPECT_TRUE(test::tensors_close(r.sum, ops::add(x, y), 0));
  EXPECT_TRUE(test::tensors_close(r.normed, ops::rms_norm(ops::add(x, y), w, 1e-5f), 0));
  EXPECT_THROW(ops::add_rms_norm(x, rnd({3, 6}, 4), w, 1e-5f), Error);
}

TEST(DecodeOps, QkvRopeSplitsLikeSeparateProjectionsIntoTheCache) {
  const int64_t B = 1, S = 3, Hq = 4, Hkv = 2, D = 6, C = 10;
  Tensor x = rnd({B, S, C}, 5), wq = rnd({Hq * D, C}, 6), wk = rnd({Hkv * D, C}, 7), wv = rnd({Hkv * D, C}, 8);
  Tensor cq = rnd({1, S, D}, 9), sq = rnd({1, S, D}, 10), ck = rnd({1, S, D}, 11), sk = rnd({1, S, D}, 12);
  Tensor qkv = ops::linear(x, cpu::concat({wq, wk, wv}, 0));
  auto heads = [&](const Tensor& w, int64_t h) { return ops::linear(x, w).reshape({B, S, h, D}); };
  ops::Qkv got = ops::qkv_rope(qkv, Hq, Hkv, cq, sq, ck, sk);
  EXPECT_TRUE(test::tensors_close(got.q, ops::rope(heads(wq, Hq), cq, sq), 1e-6));
  EXPECT_TRUE(test::tensors_close(got.k, ops::rope(heads(wk, Hkv), ck, sk), 1e-6));
  EXPECT_TRUE(test::tensors_close(got.v, heads(wv, Hkv), 1e-6));
  // Into rows [2, 5) of a cache [8, Hkv, D]: written there, the other rows untouched.
  Tensor kc = Tensor::zeros({8, Hkv, D}, DType::F32), vc = Tensor::zeros({8, Hkv, D}, DType::F32);
  ops::Qkv in = ops::qkv_rope(qkv, Hq, Hkv, cq, sq, ck, sk, kc.narrow(2, S).reshape({B, S, Hkv, D}),
                              vc.narrow(2, S).reshape({B, S, Hkv, D}));
  EXPECT_EQ(in.k.raw(), kc.narrow(2, S).raw());
  EXPECT_TRUE(test::tensors_close(kc.narrow(2, S).reshape({B, S, Hkv, D}), got.k, 0));
  EXPECT_TRUE(test::tensors_close(vc.narrow(2, S).reshape({B, S, Hkv, D}), got.v, 0));
  for (float v : kc.narrow(0, 2).to_vector()) EXPECT_EQ(v, 0.f);
  for (float v : vc.narrow(5, 3).to_vector()) EXPECT_EQ(v, 0.f);
  // Bad shapes: a width that is not (Hq + 2 Hkv)·even D, a table of the wrong width, an output of the wrong shape.
  EXPECT_THROW(ops::qkv_rope(rnd({B, S, 47}, 13), Hq, Hkv, cq, sq, ck, sk), Error);
  EXPECT_THROW(ops::qkv_rope(qkv, Hq, Hkv, rnd({1, S, 4}, 14), sq, ck, sk), Error);
  EXPECT_THROW(ops::qkv_rope(qkv, Hq, Hkv, cq, sq, ck, sk, Tensor::zeros({B, S, Hq, D}, DType::F32)), Error);
}

TEST(DecodeOps, LinearSwigluIsTheStackedProjectionThenSwiglu) {
  Tensor x = rnd({2, 5, 12}, 15), wg = rnd({7, 12}, 16), wu = rnd({7, 12}, 17);
  Tensor got = ops::linear_swiglu(x, cpu::concat({wg, wu}, 0));
  EXPECT_TRUE(test::tensors_close(got, ops::swiglu(ops::linear(x, wg), ops::linear(x, wu)), 1e-6));
  EXPECT_THROW(ops::linear_swiglu(x, rnd({7, 12}, 18)), Error);   // an odd number of rows
  EXPECT_THROW(ops::linear_swiglu(x, rnd({14, 13}, 19)), Error);  // the wrong input width
}

TEST(DecodeOps, ArgmaxTakesTheFirstOfTiesAndRejectsNaN) {
  const float inf = INFINITY;
  Tensor x = Tensor::from_vector({1, 5, 2, 5, -1, /**/ -inf, -inf, -inf, -inf, -inf, /**/ 0, 0, 0, 0, 7}, {3, 5});
  EXPECT_EQ(ops::argmax(x), (std::vector<int64_t>{1, 0, 4}));
  EXPECT_EQ(ops::argmax(x.reshape({15})), std::vector<int64_t>{14});
  EXPECT_THROW(ops::argmax(Tensor::from_vector({1, NAN, 2}, {1, 3})), Error);
  EXPECT_THROW(ops::argmax(Tensor::empty({2, 0}, DType::F32)), Error);
}

}  // namespace
}  // namespace ernie
