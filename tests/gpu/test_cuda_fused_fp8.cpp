// Quantize once, reuse (CUDA): the fused fp8 producers equal quantize() of the unfused CUDA op bit for bit
// and track the CPU twin; the linear on a pre-quantized activation equals the fp8 linear; the row-resident
// quantize kernel still matches the CPU bit for bit (qkv_norm_rope with many heads: test_cuda_ops.cpp).
#include <cstring>

#include "gpu_util.h"
#include "ops/cpu/cpu_ops.h"

namespace ernie::test {
namespace {

// Rows [first, first + n) of a host [..., C] F32 tensor set to zero.
void zero_rows(Tensor& t, int64_t first, int64_t n) {
  const int64_t c = t.dim(-1);
  std::memset(t.f32() + first * c, 0, size_t(n * c) * sizeof(float));
}

::testing::AssertionResult same_bits(const ops::Weight& gpu, const ops::Weight& want) {
  const Tensor q = gpu.w.to(kCPU), s = gpu.scale.to(kCPU), wq = want.w.to(kCPU), ws = want.scale.to(kCPU);
  if (q.shape() != wq.shape() || q.dtype() != wq.dtype() || s.shape() != ws.shape())
    return ::testing::AssertionFailure() << "codes " << shape_str(q.shape()) << " " << dtype_name(q.dtype())
                                         << ", expected " << shape_str(wq.shape()) << " " << dtype_name(wq.dtype());
  if (std::memcmp(q.raw(), wq.raw(), q.nbytes()) != 0) return ::testing::AssertionFailure() << "codes differ";
  if (std::memcmp(s.raw(), ws.raw(), s.nbytes()) != 0) return ::testing::AssertionFailure() << "scales differ";
  return ::testing::AssertionSuccess();
}

// The GPU's fp8 result against the CPU twin's (same inputs): codes may differ by one step where the CUDA
// value (fp32 sums, bf16 storage) falls on the other side of a rounding boundary.
void expect_tracks_cpu(const ops::Weight& gpu, const ops::Weight& cpu, DType dt) {
  EXPECT_TRUE(tensors_close(down(ops::dequantize(gpu)), cpu::dequantize(cpu.w, cpu.scale),
                            dt == DType::F32 ? 0.01 : 0.05, dt == DType::F32 ? 0.9999 : 0.998));
  EXPECT_TRUE(tensors_close(gpu.scale.to(kCPU), cpu.scale, dt == DType::F32 ? 1e-5 : 1e-2));
}

// Shapes: the DiT's hidden width, an odd row count with rows that fit one pack per thread, a width the
// pack does not divide for bf16 (the composed fallback), and a row too long for one block (fallback).
TEST(CudaFusedFp8, RmsNormModulateFp8) {
  ERNIE_REQUIRE_GPU();
  FOR_DTYPES for (Shape s : {Shape{2, 9, 4096}, Shape{2, 7, 200}, Shape{2, 5, 12}, Shape{1, 3, 40000}})
    for (int64_t vb : {int64_t(2), int64_t(1)}) for (DType wt : {dt, DType::F32, DType::BF16}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + shape_str(s) + " vector rows " + std::to_string(vb) +
                   " weight " + dtype_name(wt));
      const int64_t B = s[0], S = s[1], C = s[2];
      if (vb > B) continue;
      Tensor x = as_dtype(rnd(s, 60, 2.f, 0.5f), dt), w = as_dtype(rnd({C}, 61), wt);
      Tensor shift = as_dtype(rnd({vb, C}, 62), dt), scl = as_dtype(rnd({vb, C}, 63), dt);
      if (vb == 2) {  // batch row 1: zero input and shift, so its results are all-zero rows
        zero_rows(x, S, S);
        zero_rows(shift, 1, 1);
      }
      const Tensor gx = up(x, dt), gw = up(w, wt), gsh = up(shift, dt), gsc = up(scl, dt);
      const ops::Weight got = ops::rms_norm_modulate_fp8(gx, gw, 1e-6f, gsh, gsc);
      const Tensor y = ops::rms_norm_modulate(gx, gw, 1e-6f, gsh, gsc);
      EXPECT_TRUE(same_bits(got, ops::quantize(y.reshape({B * S, C}), DType::F8_E4M3)));
      // the plain op and the fused one against the CPU twins
      const Tensor ref = cpu::modulate(cpu::rms_norm(x, w, 1e-6f), shift, scl);
      EXPECT_TRUE(tensors_close(down(y), ref, tol(dt), min_cos(dt)));
      const ops::Weight cq = cpu::rms_norm_modulate_fp8(x, w, 1e-6f, shift, scl, Tensor());
      expect_tracks_cpu(got, cq, dt);
      if (vb == 2) { EXPECT_EQ(got.scale.to(kCPU).f32()[S], 1.f); }  // an all-zero row
      // A static scale (saturating the largest values): quantize(y, F8_E4M3, scale) bit for bit.
      const Tensor fixed = Tensor::from_vector({0.004f}, {1});
      EXPECT_TRUE(same_bits(ops::rms_norm_modulate_fp8(gx, gw, 1e-6f, gsh, gsc, fixed.to(kGPU)),
                            ops::quantize(y.reshape({B * S, C}), DType::F8_E4M3, fixed.to(kGPU))));
    }
}

TEST(CudaFusedFp8, GegluFp8) {
  ERNIE_REQUIRE_GPU();
  FOR_DTYPES for (Shape s : {Shape{1, 7, 12288}, Shape{3, 5, 40}, Shape{2, 3, 36}, Shape{1, 2, 40000}}) {
    SCOPED_TRACE(std::string(dtype_name(dt)) + " " + shape_str(s));
    Tensor gate = as_dtype(rnd(s, 70, 3.f), dt), u = as_dtype(rnd(s, 71, 2.f), dt);
    const int64_t C = s.back(), rows = gate.numel() / C;
    zero_rows(gate, 1, 1);  // gelu(0) = 0: an all-zero row
    const Tensor gg = up(gate, dt), gu = up(u, dt);
    const ops::Weight got = ops::geglu_fp8(gg, gu);
    EXPECT_TRUE(same_bits(got, ops::quantize(ops::geglu(gg, gu).reshape({rows, C}), DType::F8_E4M3)));
    expect_tracks_cpu(got, cpu::geglu_fp8(gate, u, Tensor()), dt);
    EXPECT_EQ(got.scale.to(kCPU).f32()[1], 1.f);
    const Tensor fixed = Tensor::from_vector({0.01f}, {1}).to(kGPU);
    EXPECT_TRUE(same_bits(ops::geglu_fp8(gg, gu, fixed),
                          ops::quantize(ops::geglu(gg, gu).reshape({rows, C}), DType::F8_E4M3, fixed)));
  }
}

// One quantization, several GEMMs: each equals the fp8 linear that quantizes its input itself (the fp8
// tensor-core path for BF16 with K, N multiples of 16; the float fallback for F32 or K = 40), and the CPU twin.
TEST(CudaFusedFp8, LinearOnAQuantizedInput) {
  ERNIE_REQUIRE_GPU();
  FOR_DTYPES for (int64_t K : {int64_t(96), int64_t(40)}) for (bool with_bias : {false, true}) {
    SCOPED_TRACE(std::string(dtype_name(dt)) + " K=" + std::to_string(K) + (with_bias ? " bias" : ""));
    const int64_t M = 77;
    const Tensor x = as_dtype(rnd({1, M, K}, 1), dt);
    const ops::Weight xq = ops::quantize(up(x, dt).reshape({M, K}), DType::F8_E4M3);
    const ops::Weight cxq = cpu::quantize(x.reshape({M, K}), DType::F8_E4M3);
    for (int64_t N : {int64_t(48), int64_t(32)}) {
      const ops::Weight w = cpu::quantize(rnd({N, K}, 2 + uint32_t(N), 0.05f), DType::F8_E4M3);
      const ops::Weight gw(w.w.to(kGPU), w.scale.to(kGPU));
      const Tensor b = with_bias ? as_dtype(rnd({N}, 3), dt) : Tensor();
      const Tensor gb = with_bias ? up(b, dt) : Tensor();
      const Tensor got = ops::linear(xq, gw, dt, gb);
      ASSERT_EQ(got.shape(), (Shape{M, N}));
      EXPECT_EQ(got.dtype(), dt);
      EXPECT_TRUE(tensors_close(down(got), down(ops::linear(up(x, dt), gw, gb)).reshape({M, N}), 0));
      EXPECT_TRUE(tensors_close(down(got), cpu::linear_fp8(cxq.w, cxq.scale, w.w, w.scale, b, DType::F32),
                                tol(dt, 1e-5), min_cos(dt)));
    }
  }
}

// linear_fc2 + gated residual on pre-quantized codes: the cuBLASLt epilogue (one gate for every row) and the
// composition (a gate per batch row), each equal to the op on the float input, and the CPU twin.
TEST(CudaFusedFp8, LinearGatedResidualOnAQuantizedInput) {
  ERNIE_REQUIRE_GPU();
  FOR_DTYPES for (int64_t gb : {int64_t(1), int64_t(2)}) {
    SCOPED_TRACE(std::string(dtype_name(dt)) + " gate rows " + std::to_string(gb));
    const int64_t B = 2, S = 40, K = 96, N = 48;
    const Tensor x = as_dtype(rnd({B, S, K}, 10), dt), res = as_dtype(rnd({B, S, N}, 11), dt);
    const Tensor gate = as_dtype(rnd({gb, N}, 13), dt);
    const ops::Weight w = cpu::quantize(rnd({N, K}, 12, 0.05f), DType::F8_E4M3);
    const ops::Weight gw(w.w.to(kGPU), w.scale.to(kGPU));
    const ops::Weight xq = ops::quantize(up(x, dt).reshape({B * S, K}), DType::F8_E4M3);
    const Tensor got = ops::linear_gated_residual(up(res, dt), up(gate, dt), xq, gw);
    EXPECT_EQ(got.dtype(), dt);
    const Tensor unfused = ops::linear_gated_residual(up(res, dt), up(gate, dt), up(x, dt), gw);
    EXPECT_TRUE(tensors_close(down(got), down(unfused), 0));
    const ops::Weight cxq = cpu::quantize(x.reshape({B * S, K}), DType::F8_E4M3);
    const Tensor ref = cpu::gated_residual(
        res, gate, cpu::linear_fp8(cxq.w, cxq.scale, w.w, w.scale, {}, DType::F32).reshape({B, S, N}));
    EXPECT_TRUE(tensors_close(down(got), ref, tol(dt, 1e-5), min_cos(dt)));
  }
}

// Nothing to multiply: no rows gives [0, N]; K = 0 gives the bias in every row (no N×K zero weight).
TEST(CudaFusedFp8, LinearEmptyShapes) {
  ERNIE_REQUIRE_GPU();
  const Tensor b = rnd({8}, 4);
  const ops::Weight w0 = cpu::quantize(Tensor::empty({8, 0}, DType::F32), DType::F8_E4M3);
  const ops::Weight gw0(w0.w.to(kGPU), w0.scale.to(kGPU));
  const Tensor y = ops::linear(up(Tensor::empty({2, 3, 0}, DType::F32), DType::BF16), gw0, up(b, DType::BF16));
  ASSERT_EQ(y.shape(), (Shape{2, 3, 8}));
  const Tensor rows = cpu::concat(std::vector<Tensor>(6, as_dtype(b, DType::BF16).reshape({1, 8})), 0);
  EXPECT_TRUE(tensors_close(down(y).reshape({6, 8}), rows, 0));
  const ops::Weight w = cpu::quantize(rnd({8, 16}, 5), DType::F8_E4M3);
  const ops::Weight gw(w.w.to(kGPU), w.scale.to(kGPU));
  EXPECT_EQ(ops::linear(up(Tensor::empty({0, 16}, DType::F32), DType::BF16), gw).shape(), (Shape{0, 8}));
  const ops::Weight none = ops::quantize(up(Tensor::empty({0, 16}, DType::F32), DType::BF16), DType::F8_E4M3);
  EXPECT_EQ(ops::linear(none, gw, DType::BF16).shape(), (Shape{0, 8}));
}

// quantize() on rows that fit a block (the row-resident kernel: one to eight packs per thread) and rows
// that do not, against the CPU bit for bit.
TEST(CudaFusedFp8, QuantizeRowsMatchCpuBitForBit) {
  ERNIE_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (DType qt : {DType::F8_E4M3, DType::I8})
      for (Shape s : {Shape{5, 12288}, Shape{33, 4096}, Shape{3, 40000}, Shape{9, 24}}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " -> " + dtype_name(qt) + " " + shape_str(s));
        Tensor h = rnd(s, 3, 2.f);
        zero_rows(h, 1, 1);
        h = h.cast(dt);
        EXPECT_TRUE(same_bits(ops::quantize(h.to(kGPU), qt), cpu::quantize(h, qt)));
      }
}

}  // namespace
}  // namespace ernie::test
