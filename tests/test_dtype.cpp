// Host-side float conversions used when reading checkpoints.
#include <gtest/gtest.h>

#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

using namespace ernie;

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(round_bf16(994.924f), 996.0f);  // the reference's timestep rounding (DESIGN.md)
  EXPECT_EQ(round_bf16(875.0f), 876.0f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-INFINITY)), -INFINITY);
}

TEST(DType, F16RoundTrip) {
  for (float v : {0.f, 1.f, -2.5f, 65504.f, 6.1035156e-05f, 5.9604645e-08f, 0.333333f}) {
    float r = f16_to_f32(f32_to_f16(v));
    EXPECT_NEAR(r, v, std::fabs(v) * 1e-3 + 1e-8) << v;
  }
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
}

TEST(DType, Fp8Decode) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);    // exp 7, man 0
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);  // the e4m3 maximum
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
  EXPECT_EQ(fp8_e5m2_to_f32(0x3c), 1.0f);
  EXPECT_EQ(fp8_e5m2_to_f32(0xc0), -2.0f);
}

TEST(DType, NamesRoundTrip) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E5M2, DType::I8, DType::I32,
                  DType::I64, DType::U8, DType::BOOL})
    EXPECT_EQ(dtype_from_name(dtype_name(t)), t);
  EXPECT_FALSE(dtype_from_name("F64").has_value());
}

TEST(Tensor, ViewsAndErrors) {
  Tensor t = Tensor::from_vector({0, 1, 2, 3, 4, 5}, {3, 2});
  EXPECT_EQ(t.reshape({2, -1}).shape(), (Shape{2, 3}));
  EXPECT_EQ(t.narrow(1, 2).to_vector(), (std::vector<float>{2, 3, 4, 5}));
  EXPECT_THROW(t.reshape({4, 2}), Error);
  EXPECT_THROW(t.narrow(2, 2), Error);
  Tensor seq = t.reshape({1, 3, 2});  // one sequence of 3 positions
  EXPECT_EQ(seq.narrow_seq(1, 2).shape(), (Shape{1, 2, 2}));
  EXPECT_EQ(seq.narrow_seq(1, 2).to_vector(), (std::vector<float>{2, 3, 4, 5}));
  EXPECT_EQ(seq.narrow_seq(3, 0).numel(), 0);
  EXPECT_THROW(seq.narrow_seq(2, 2), Error);
  EXPECT_THROW(t.narrow_seq(0, 1), Error);  // [3, 2] is not one sequence
  EXPECT_THROW(Device::parse("gpu0"), Error);
  EXPECT_EQ(Device::parse("cuda:1").index, 1);
}
