// The models on CUDA against the diffusers reference (golden tensors of the tiny fixture): f32 mode
// within relative L2 1e-3, bf16 within 3e-2 and cosine >= 0.999 (DESIGN.md).
#include "gpu_util.h"
#include "io/model_folder.h"
#include "models/ernie_dit.h"

namespace ernie::test {
namespace {

constexpr double kF32RelL2 = 1e-3, kBf16RelL2 = 3e-2, kBf16Cos = 0.999;

::testing::AssertionResult close_for(const Tensor& got, const Tensor& ref, DType dt) {
  return dt == DType::F32 ? tensors_close(got, ref, kF32RelL2) : tensors_close(got, ref, kBf16RelL2, kBf16Cos);
}

TEST(CudaGolden, DitForward) {
  ERNIE_REQUIRE_GPU();
  const ModelFolder m = ModelFolder::open(tiny_model(), false);
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    ErnieDit d = ErnieDit::load(m, kGPU, dt);
    Tensor out = d.forward(golden_tensor("dit.x").to_f32(), golden_tensor("dit.t").to_vector(),
                           golden_tensor("dit.text").to_f32(), golden_ids("dit.text_lens"));
    auto r = close_for(out, golden_tensor("dit.out"), dt);
    EXPECT_TRUE(r);
    std::printf("dit.out %s: %s\n", dtype_name(dt), r.message());
  }
}

}  // namespace
}  // namespace ernie::test
