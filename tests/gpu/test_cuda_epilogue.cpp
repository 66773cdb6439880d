// linear_gated_residual on CUDA (fp8 weights with one gate for every row: the gate in the fp8 GEMM's weight
// scales and the residual as its C) against the CPU composition gated_residual(residual, gate, linear(x, w)).
#include <string>

#include "gpu_util.h"
#include "ops/cpu/cpu_ops.h"

namespace ernie::test {
namespace {

TEST(CudaEpilogue, LinearGatedResidualMatchesComposition) {
  ERNIE_REQUIRE_GPU();
  const int64_t K = 96, N = 48;
  for (DType dt : {DType::F32, DType::BF16})
    for (DType wt : {DType::BF16, DType::F8_E4M3, DType::I8})
      for (int64_t gate_rows : {1, 2})  // one gate for both rows: fp8 in the GEMM; a gate per row: composed
        for (int64_t S : {1, 77}) {     // 2 rows in all: the GEMV, composed
          SCOPED_TRACE(std::string(dtype_name(dt)) + " weights " + dtype_name(wt) + " gate rows " +
                       std::to_string(gate_rows) + " S " + std::to_string(S));
          Tensor x = as_dtype(rnd({2, S, K}, 1), dt), res = as_dtype(rnd({2, S, N}, 2), dt);
          Tensor gate = as_dtype(rnd({gate_rows, N}, 3), dt), w = rnd({N, K}, 4, 0.05f);
          ops::Weight q = wt == DType::BF16 ? ops::Weight(w.cast(DType::BF16)) : cpu::quantize(w, wt);
          Tensor y = q.quantized() ? cpu::linear_q(x, q.w, q.scale, {}) : cpu::linear(x, q.w, {});
          Tensor ref = cpu::gated_residual(res, gate, y);
          ops::Weight gq = q.quantized() ? ops::Weight(q.w.to(kGPU), q.scale.to(kGPU)) : ops::Weight(q.w.to(kGPU));
          Tensor got = ops::linear_gated_residual(up(res, dt), up(gate, dt), up(x, dt), gq);
          EXPECT_EQ(got.dtype(), dt);
          EXPECT_EQ(got.shape(), res.shape());
          EXPECT_TRUE(tensors_close(down(got), ref, tol(dt, 1e-5), min_cos(dt)));
        }
}

TEST(CudaEpilogue, LinearGatedResidualBadShapesGiveErrors) {
  ERNIE_REQUIRE_GPU();
  Tensor x = rnd({1, 8, 16}, 1).to(kGPU), w = rnd({12, 16}, 2).to(kGPU);
  EXPECT_THROW(ops::linear_gated_residual(rnd({1, 8, 11}, 3).to(kGPU), rnd({1, 12}, 4).to(kGPU), x, w), Error);
  EXPECT_THROW(ops::linear_gated_residual(rnd({1, 8, 12}, 3).to(kGPU), rnd({1, 5}, 4).to(kGPU), x, w), Error);
  EXPECT_THROW(ops::linear_gated_residual(rnd({1, 8, 12}, 3).to(kGPU), rnd({1, 12}, 4).to(kGPU), rnd({1, 8, 15}, 5).to(kGPU), w),
               Error);
}

}  // namespace
}  // namespace ernie::test
