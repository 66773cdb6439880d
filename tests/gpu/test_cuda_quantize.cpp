// 8-bit weights on CUDA against the CPU twin: quantization bit for bit, the quantized linear (fp8 tensor-core
// GEMM with outer-vector scales, and the float fallback on the same codes), and the tiny DiT.
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "gpu_util.h"
#include "convert/convert.h"
#include "models/ernie_dit.h"
#include "models/mistral.h"
#include "ops/cpu/cpu_ops.h"

namespace ernie::test {
namespace {

// Shapes: rows that fit a block's registers, longer rows (20000 F32), unaligned rows (50 columns), rows
// of no elements.
TEST(CudaQuantize, MatchesCpuBitForBit) {
  ERNIE_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (DType qt : {DType::F8_E4M3, DType::I8})
      for (Shape s : {Shape{40, 96}, Shape{7, 50}, Shape{3, 4096}, Shape{2, 20000}, Shape{4, 0}}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " -> " + dtype_name(qt) + " " + shape_str(s));
        Tensor h = rnd(s, 3, 2.f).cast(dt);
        if (s[0] == 7) h = Tensor::zeros(s, dt);  // all-zero rows too
        ops::Weight c = cpu::quantize(h, qt), g = ops::quantize(h.to(kGPU), qt);
        Tensor gq = g.w.to(kCPU), gs = g.scale.to(kCPU);
        ASSERT_EQ(gq.dtype(), qt);
        EXPECT_EQ(std::memcmp(gq.raw(), c.w.raw(), c.w.nbytes()), 0);
        EXPECT_EQ(std::memcmp(gs.raw(), c.scale.raw(), c.scale.nbytes()), 0);
        EXPECT_TRUE(tensors_close(down(ops::dequantize(g)), cpu::dequantize(c.w, c.scale), 0));
      }
}

// A static activation scale (convert --calibrate) and max_abs, against the CPU twins, on the same shapes.
TEST(CudaQuantize, StaticScaleAndMaxAbsMatchCpu) {
  ERNIE_REQUIRE_GPU();
  const Tensor s = Tensor::from_vector({0.0123f}, {1});
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (DType qt : {DType::F8_E4M3, DType::I8})
      for (Shape sh : {Shape{40, 96}, Shape{7, 50}, Shape{3, 4096}, Shape{2, 20000}, Shape{4, 0}}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " -> " + dtype_name(qt) + " " + shape_str(sh));
        const Tensor h = rnd(sh, 5, 4.f).cast(dt);  // past 448 · s: saturation too
        ops::Weight c = cpu::quantize_static(h, qt, s), g = ops::quantize(h.to(kGPU), qt, s.to(kGPU));
        Tensor gq = g.w.to(kCPU), gs = g.scale.to(kCPU);
        EXPECT_EQ(std::memcmp(gq.raw(), c.w.raw(), c.w.nbytes()), 0);
        EXPECT_EQ(std::memcmp(gs.raw(), c.scale.raw(), c.scale.nbytes()), 0);
        EXPECT_EQ(ops::max_abs(h.to(kGPU)), cpu::max_abs(h));
      }
  Tensor nan = Tensor::from_vector(std::vector<float>(5000, 1.f), {5000});
  nan.f32()[4321] = NAN;
  EXPECT_TRUE(std::isnan(ops::max_abs(nan.to(kGPU))));
  EXPECT_EQ(ops::max_abs(Tensor::zeros({0}, DType::F32).to(kGPU)), 0.f);
}

// y = linear(x, 8-bit w): the fp8 tensor-core path (BF16, K and N multiples of 16), the fallback (F32
// activations, or K = 40) and int8, each against cpu::linear_q on the same values.
TEST(CudaQuantize, LinearMatchesCpuTwin) {
  ERNIE_REQUIRE_GPU();
  std::printf("fp8 GEMM on the tensor cores: %s\n", cuda::fp8_gemm_supported(0) ? "yes" : "no");
  for (DType dt : {DType::F32, DType::BF16})
    for (DType qt : {DType::F8_E4M3, DType::I8})
      for (int64_t K : {96, 40})
        for (bool with_bias : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(dt)) + " " + dtype_name(qt) + " K=" + std::to_string(K) +
                       (with_bias ? " bias" : ""));
          const int64_t N = 48;
          Tensor x = as_dtype(rnd({2, 77, K}, 1), dt), w = rnd({N, K}, 2, 0.05f);
          Tensor b = with_bias ? as_dtype(rnd({N}, 3), dt) : Tensor();
          ops::Weight q = cpu::quantize(w, qt);
          Tensor ref = cpu::linear_q(x, q.w, q.scale, b);
          Tensor got = ops::linear(up(x, dt), ops::Weight(q.w.to(kGPU), q.scale.to(kGPU)), with_bias ? up(b, dt) : Tensor());
          EXPECT_EQ(got.dtype(), dt);
          EXPECT_TRUE(tensors_close(down(got), ref, tol(dt, 1e-5), min_cos(dt)));
        }
  // The fp8 GEMM without cuBLASLt's outer-vector scales (scaled and biased after it), forced on shapes no
  // other test plans (plans are cached per shape).
  setenv("ERNIE_FP8_POST_SCALE", "1", 1);
  for (bool with_bias : {false, true}) {
    SCOPED_TRACE(with_bias ? "post-scale, bias" : "post-scale");
    const int64_t N = 64, K = 112;
    Tensor x = as_dtype(rnd({1, 33, K}, 4), DType::BF16), w = rnd({N, K}, 5, 0.05f);
    Tensor b = with_bias ? as_dtype(rnd({N}, 6), DType::BF16) : Tensor();
    ops::Weight q = cpu::quantize(w, DType::F8_E4M3);
    Tensor got = ops::linear(up(x, DType::BF16), ops::Weight(q.w.to(kGPU), q.scale.to(kGPU)),
                             with_bias ? up(b, DType::BF16) : Tensor());
    EXPECT_TRUE(tensors_close(down(got), cpu::linear_q(x, q.w, q.scale, b), 1e-2, 0.9999));
  }
  unsetenv("ERNIE_FP8_POST_SCALE");
}

TEST(CudaQuantize, TinyDitTracksCpu) {
  ERNIE_REQUIRE_GPU();
  ModelFolder m = ModelFolder::open(tiny_model(), false);
  QuantPolicy all;
  all.keep_first_last_dit_blocks = false;
  const Tensor x = golden_tensor("dit.x").to_f32(), text = golden_tensor("dit.text").to_f32();
  const std::vector<float> t = golden_tensor("dit.t").to_vector();
  const std::vector<int64_t> lens = golden_ids("dit.text_lens");
  for (DType qt : {DType::F8_E4M3, DType::I8}) {
    Tensor ref = ErnieDit::load(m, kCPU, DType::F32, false, qt, all).forward(x, t, text, lens);
    for (DType dt : {DType::F32, DType::BF16}) {
      Tensor got = down(ErnieDit::load(m, kGPU, dt, false, qt, all).forward(x, t, text, lens));
      auto r = tensors_close(got, ref, dt == DType::F32 ? 1e-4 : 3e-2, 0.999);
      std::printf("dit.out %s weights, CUDA %s vs CPU: %s\n", dtype_name(qt), dtype_name(dt), r.message());
      EXPECT_TRUE(r);
    }
  }
}

// The text encoder of an 8-bit file on CUDA: projections kept 8-bit and expanded as the forward runs give
// what expanding them at load gives, in less device memory; so does --quantize on the float folder.
TEST(CudaQuantize, TextEncoderKeepsItsWeights8bit) {
  ERNIE_REQUIRE_GPU();
  TempDir dir;
  const std::vector<int64_t> ids = {1, 22, 333, 444, 55, 6};
  for (WeightFormat wf : {WeightFormat::FP8, WeightFormat::INT8}) {
    const std::string f = dir.str() + "/" + weight_format_name(wf) + ".safetensors";
    ConvertOptions opt;
    opt.format = wf;
    opt.include_pe = false;
    convert_model(ModelFolder::open(tiny_model(), false), f, opt);
    const ModelFolder m = ModelFolder::open(f, false);
    const int layers = m.text_encoder.num_hidden_layers - 1;
    for (DType dt : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(std::string(weight_format_name(wf)) + ", " + dtype_name(dt));
      const MistralModel kept = MistralModel::load(m.text_encoder_c, m.text_encoder, kGPU, dt, layers, false, true);
      const MistralModel expanded = MistralModel::load(m.text_encoder_c, m.text_encoder, kGPU, dt, layers);
      EXPECT_LT(kept.weight_bytes(), expanded.weight_bytes());
      const Tensor want = down(expanded.forward(ids, layers));
      EXPECT_TRUE(tensors_close(down(kept.forward(ids, layers)), want, 1e-6));
      // --quantize on the float folder (quantized on the GPU, bit for bit the CPU's codes): the same.
      const std::optional<DType> q =
        QuantPolicy{}.text_encoder_quantization(wf == WeightFormat::FP8 ? DType::F8_E4M3 : DType::I8);
      const TextEncoder at_load = TextEncoder::load(ModelFolder::open(tiny_model(), false), kGPU, dt, q);
      EXPECT_EQ(at_load.weight_bytes(), kept.weight_bytes());
      EXPECT_TRUE(tensors_close(down(at_load.encode(ids)), want, 1e-6));
    }
  }
}

}  // namespace
}  // namespace ernie::test
