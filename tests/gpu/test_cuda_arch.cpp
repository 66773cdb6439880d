// What code runs where (ops/cuda/arch.cu): the probe reports the code the runtime loaded, the dispatchers
// follow it, and doctor's kernel list says the same. In the dev build on a Hopper GPU that is sm_90a code; in
// a compute_80-only build (bench/arch-stage.sh ptx-tests) it is compute_80 PTX compiled at load, and every
// Hopper-only path must stand aside.
#include <string>

#include "gpu_util.h"
#include "ops/cuda/common.h"
#include "ops/cuda/cuda_ops.h"

namespace ernie::test {
namespace {

std::string path_of(const std::vector<ops::KernelPath>& paths, const std::string& op) {
  for (const ops::KernelPath& p : paths)
    if (p.op == op) return p.path;
  return "(missing)";
}

TEST(CudaArch, ProbeReportsTheLoadedCode) {
  ERNIE_REQUIRE_GPU();
  const cuda::CodeArch& a = cuda::code_arch(0);
  std::printf("device compute %d, code sm_%d%s, built for %s\n", a.cc, a.code, a.sm90a ? "a" : "", cuda::kBuiltArchs);
  EXPECT_TRUE(a.error.empty()) << a.error;
  EXPECT_EQ(a.cc, cuda::compute_capability(0));
  EXPECT_GE(a.code, 80);
  EXPECT_LE(a.code, a.cc);  // code for a newer GPU never runs on an older one
  // The loaded code is one of the built architectures (machine code or PTX).
  EXPECT_NE(std::string(cuda::kBuiltArchs).find(std::to_string(a.code)), std::string::npos);
  EXPECT_EQ(cuda::hopper_code(0), a.cc == 90 && a.sm90a);
  EXPECT_EQ(cuda::sm90_code(0), a.code >= 90);
  EXPECT_TRUE(cuda::unusable_reason(0).empty());
}

TEST(CudaArch, DispatchersAndDoctorFollowTheCode) {
  ERNIE_REQUIRE_GPU();
  const bool hopper = cuda::hopper_code(0);
  EXPECT_EQ(ops::attention_fp8_supported(Tensor::zeros({1}, DType::BF16, kGPU), 128), hopper);
  const auto paths = cuda::kernel_paths(0);
  for (const ops::KernelPath& p : paths) std::printf("  %-28s %s\n", p.op.c_str(), p.path.c_str());
  EXPECT_EQ(path_of(paths, "attention").find("wgmma") != std::string::npos, hopper);
  EXPECT_EQ(path_of(paths, "launch overlap") == "programmatic dependent launch", cuda::sm90_code(0));
  EXPECT_EQ(path_of(paths, "linear, fp8 weights (W8A8)").find("fp8 GEMM") != std::string::npos,
            cuda::fp8_gemm_supported(0));
  // The attention that runs agrees with the CPU whichever kernel the dispatcher took (bf16, head_dim 128).
  const Tensor q = as_dtype(rnd({1, 300, 2, 128}, 1), DType::BF16), k = as_dtype(rnd({1, 300, 2, 128}, 2), DType::BF16),
               v = as_dtype(rnd({1, 300, 2, 128}, 3), DType::BF16);
  const Tensor want = ops::attention(q, k, v, 0.0884f, {});
  const Tensor got = down(ops::attention(up(q, DType::BF16), up(k, DType::BF16), up(v, DType::BF16), 0.0884f, {}));
  EXPECT_TRUE(tensors_close(got, want, 1e-2, 0.9999));
}

}  // namespace
}  // namespace ernie::test
