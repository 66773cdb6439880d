// Quantize once, reuse (CPU): the fused fp8 producers (rms_norm_modulate_fp8, geglu_fp8) equal quantizing the
// unfused op's result bit for bit, and the linear on a pre-quantized activation equals the fp8 linear that
// quantizes its input itself. The CUDA kernels are checked against these in tests/gpu/test_cuda_fused_fp8.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>

#include "core/error.h"
#include "golden.h"
#include "ops/ops.h"

namespace ernie {
namespace {

using test::tensors_close;

using test::rnd;

// Rows [first, first + n) of a [..., C] tensor set to zero.
void zero_rows(Tensor& t, int64_t first, int64_t n) {
  const int64_t c = t.dim(-1);
  std::memset(t.f32() + first * c, 0, size_t(n * c) * sizeof(float));
}

::testing::AssertionResult same_bits(const ops::Weight& got, const ops::Weight& want) {
  if (got.w.shape() != want.w.shape() || got.w.dtype() != want.w.dtype() || got.scale.shape() != want.scale.shape())
    return ::testing::AssertionFailure() << "codes " << shape_str(got.w.shape()) << " " << dtype_name(got.w.dtype())
                                         << ", expected " << shape_str(want.w.shape()) << " "
                                         << dtype_name(want.w.dtype());
  if (std::memcmp(got.w.raw(), want.w.raw(), want.w.nbytes()) != 0)
    return ::testing::AssertionFailure() << "codes differ";
  if (std::memcmp(got.scale.raw(), want.scale.raw(), want.scale.nbytes()) != 0)
    return ::testing::AssertionFailure() << "scales differ";
  return ::testing::AssertionSuccess();
}

using test::expect_error;

TEST(FusedFp8, RmsNormModulateIsQuantizeOfTheUnfusedOp) {
  for (int64_t C : {64, 37})
    for (int64_t vb : {2, 1})
      for (bool affine : {true, false}) {
        SCOPED_TRACE("C " + std::to_string(C) + " vector rows " + std::to_string(vb) + (affine ? " affine" : ""));
        const int64_t B = 2, S = 9;
        Tensor x = rnd({B, S, C}, 1, 2.f, 0.3f), w = affine ? rnd({C}, 2) : Tensor();
        Tensor shift = rnd({vb, C}, 3), scale = rnd({vb, C}, 4);
        if (vb == 2) {  // batch row 1: zero input and zero shift, so its results are all-zero rows
          zero_rows(x, S, S);
          zero_rows(shift, 1, 1);
        }
        const ops::Weight got = ops::rms_norm_modulate_fp8(x, w, 1e-6f, shift, scale);
        const Tensor y = ops::rms_norm_modulate(x, w, 1e-6f, shift, scale);
        EXPECT_TRUE(same_bits(got, ops::quantize(y.reshape({B * S, C}), DType::F8_E4M3)));
        if (vb == 2) { EXPECT_EQ(got.scale.f32()[S], 1.f); }  // an all-zero row
        // and it is the op's result, to fp8 precision
        EXPECT_TRUE(tensors_close(ops::dequantize(got), y.reshape({B * S, C}), 0.05, 0.998));
        // a static scale (small enough to saturate the largest values) instead of one per row
        const Tensor fixed = Tensor::from_vector({0.004f}, {1});
        EXPECT_TRUE(same_bits(ops::rms_norm_modulate_fp8(x, w, 1e-6f, shift, scale, fixed),
                              ops::quantize(y.reshape({B * S, C}), DType::F8_E4M3, fixed)));
      }
}

TEST(FusedFp8, GegluIsQuantizeOfTheUnfusedOp) {
  for (Shape s : {Shape{3, 5, 40}, Shape{7, 33}, Shape{1, 1, 1}}) {
    SCOPED_TRACE(shape_str(s));
    Tensor gate = rnd(s, 5, 3.f), up = rnd(s, 6, 2.f);
    const int64_t C = s.back(), rows = gate.numel() / C;
    if (rows > 2) zero_rows(gate, 1, 1);  // gelu(0) = 0: an all-zero row
    const ops::Weight got = ops::geglu_fp8(gate, up);
    const Tensor y = ops::geglu(gate, up).reshape({rows, C});
    EXPECT_TRUE(same_bits(got, ops::quantize(y, DType::F8_E4M3)));
    if (rows > 2) { EXPECT_EQ(got.scale.f32()[1], 1.f); }
    EXPECT_TRUE(tensors_close(ops::dequantize(got), y, 0.05, 0.998));
    const Tensor fixed = Tensor::from_vector({0.01f}, {1});
    EXPECT_TRUE(same_bits(ops::geglu_fp8(gate, up, fixed), ops::quantize(y, DType::F8_E4M3, fixed)));
    EXPECT_THROW(ops::geglu_fp8(gate, up, Tensor::from_vector({-1.f}, {1})), Error);
  }
}

// One quantization feeds several GEMMs: each equals the fp8 linear that quantizes x itself.
TEST(FusedFp8, LinearOnAQuantizedInputEqualsTheFp8Linear) {
  const int64_t M = 23, K = 96;
  const Tensor x = rnd({1, M, K}, 7);
  const ops::Weight xq = ops::quantize(x.reshape({M, K}), DType::F8_E4M3);
  for (int64_t N : {40, 8})
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE("N " + std::to_string(N) + (with_bias ? " bias" : ""));
      const ops::Weight w = ops::quantize(rnd({N, K}, 8 + uint32_t(N), 0.05f), DType::F8_E4M3);
      const Tensor b = with_bias ? rnd({N}, 9) : Tensor();
      const Tensor got = ops::linear(xq, w, DType::F32, b);
      ASSERT_EQ(got.shape(), (Shape{M, N}));
      EXPECT_TRUE(tensors_close(got, ops::linear(x, w, b).reshape({M, N}), 0));
    }
}

// The DiT's linear_fc2 + gated residual on geglu_fp8's codes equals it on the float input.
TEST(FusedFp8, LinearGatedResidualOnAQuantizedInput) {
  const int64_t B = 2, S = 20, K = 64, N = 48;
  const Tensor x = rnd({B, S, K}, 10), res = rnd({B, S, N}, 11);
  const ops::Weight w = ops::quantize(rnd({N, K}, 12, 0.05f), DType::F8_E4M3);
  const ops::Weight xq = ops::quantize(x.reshape({B * S, K}), DType::F8_E4M3);
  for (int64_t gb : {1, 2}) {
    const Tensor gate = rnd({gb, N}, 13);
    EXPECT_TRUE(tensors_close(ops::linear_gated_residual(res, gate, xq, w),
                              ops::linear_gated_residual(res, gate, x, w), 0));
  }
  expect_error([&] { ops::linear_gated_residual(res, rnd({1, N}, 13), xq, ops::Weight(rnd({N, K}, 12))); },
               "fp8 weight");
  expect_error([&] { ops::linear_gated_residual(rnd({B, S + 1, N}, 11), rnd({1, N}, 13), xq, w); }, "for residual");
}

TEST(FusedFp8, EmptyShapes) {
  const ops::Weight w = ops::quantize(rnd({8, 16}, 1), DType::F8_E4M3);
  const ops::Weight none = ops::quantize(Tensor::empty({0, 16}, DType::F32), DType::F8_E4M3);
  EXPECT_EQ(ops::linear(none, w, DType::F32).shape(), (Shape{0, 8}));
  const ops::Weight g = ops::geglu_fp8(Tensor::empty({0, 16}, DType::F32), Tensor::empty({0, 16}, DType::F32));
  EXPECT_EQ(g.w.shape(), (Shape{0, 16}));
  EXPECT_EQ(g.scale.shape(), (Shape{0}));
  // Nothing to sum (in = 0): every row is the bias, float or 8-bit weight.
  const Tensor b = rnd({8}, 2), x0 = Tensor::empty({2, 3, 0}, DType::F32);
  const Tensor rows = ops::concat(std::vector<Tensor>(6, b.reshape({1, 8})), 0).reshape({2, 3, 8});
  EXPECT_TRUE(tensors_close(ops::linear(x0, Tensor::zeros({8, 0}, DType::F32), b), rows, 0));
  for (DType qt : {DType::F8_E4M3, DType::I8})
    EXPECT_TRUE(tensors_close(ops::linear(x0, ops::quantize(Tensor::zeros({8, 0}, DType::F32), qt), b), rows, 0));
}

TEST(FusedFp8, BadInputsGiveClearErrors) {
  const Tensor x = rnd({4, 16}, 1);
  const ops::Weight xq = ops::quantize(x, DType::F8_E4M3);
  const ops::Weight w8 = ops::quantize(rnd({8, 16}, 2), DType::F8_E4M3);
  expect_error([&] { ops::linear(ops::Weight(x), w8, DType::F32); }, "row scales");
  expect_error([&] { ops::linear(xq, ops::Weight(rnd({8, 16}, 2)), DType::F32); }, "fp8 weight");
  expect_error([&] { ops::linear(xq, ops::quantize(rnd({8, 16}, 2), DType::I8), DType::F32); }, "F8_E4M3");
  expect_error([&] { ops::linear(xq, ops::quantize(rnd({8, 12}, 2), DType::F8_E4M3), DType::F32); }, "does not match");
  expect_error([&] { ops::linear(xq, w8, DType::BF16); }, "computes in F32");
  expect_error([&] { ops::linear(xq, w8, DType::F32, rnd({7}, 3)); }, "should have 8");
  const Tensor x3 = rnd({2, 3, 16}, 4);
  expect_error([&] { ops::rms_norm_modulate_fp8(x3, Tensor(), 1e-6f, rnd({3, 16}, 5), rnd({2, 16}, 6)); },
               "shift");
  expect_error([&] { ops::rms_norm_modulate_fp8(x3, rnd({15}, 7), 1e-6f, rnd({2, 16}, 5), rnd({2, 16}, 6)); },
               "weight");
  expect_error([&] { ops::geglu_fp8(x3, rnd({2, 3, 15}, 8)); }, "shapes differ");
}

}  // namespace
}  // namespace ernie
