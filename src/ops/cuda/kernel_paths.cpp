// The kernel each op takes on a device, by what the device can do and what code of this binary runs there
// (code_arch): the same tests the dispatchers make, in words, for doctor.
#include <cublasLt.h>

#include <cstdlib>
#include <cstring>

#include "ops/cuda/common.h"
#include "ops/cuda/cuda_ops.h"

namespace ernie::cuda {

namespace {
bool env_is(const char* name, const char* value) {
  const char* e = std::getenv(name);
  return e && std::strcmp(e, value) == 0;
}
std::string sm(int v) { return "sm_" + std::to_string(v); }
}  // namespace

std::vector<ops::KernelPath> kernel_paths(int device) {
  if (const std::string why = unusable_reason(device); !why.empty()) return {{"all", "none: " + why}};
  const CodeArch& a = code_arch(device);
  const bool hopper = hopper_code(device), sm90 = sm90_code(device);
  std::vector<ops::KernelPath> p;
  const std::string code = a.code == a.cc ? sm(a.code) + (a.sm90a ? "a" : "") + " code"
                                          : "compute_" + std::to_string(a.code) + " PTX compiled at load";
  p.push_back({"code", code + " on a compute " + std::to_string(a.cc / 10) + "." + std::to_string(a.cc % 10) +
                           " device (built for " + kBuiltArchs + ")"});
  const char* portable = "mma.sync flash kernel (sm_80 code)";
  p.push_back({"attention", hopper ? "wgmma + TMA flash kernel (sm_90a)" : portable});
  p.push_back({"attention, fp8 DiT",
               hopper ? "fp8 wgmma flash kernel (sm_90a)" : std::string("bf16: ") + portable + " (the fp8 kernel is sm_90a)"});
  const size_t lt = cublasLtGetVersion();
  const std::string cublas = "cuBLASLt " + std::to_string(lt / 10000) + "." + std::to_string(lt / 100 % 100);
  p.push_back({"linear, bf16 weights", cublas});
  std::string fp8;
  if (fp8_gemm_supported(device))
    fp8 = cublas + (fp8_row_scales_supported(device) ? " fp8 GEMM, row and column scales in the GEMM"
                                                      : " fp8 GEMM, tensor-wise, rows and columns scaled after");
  else if (a.cc >= 89)
    fp8 = "fp8 tensor cores turned off (ERNIE_FP8_GEMM=0): codes expanded to bf16 for a bf16 GEMM";
  else
    fp8 = "no fp8 tensor cores (needs compute capability 8.9): codes expanded to bf16 for a bf16 GEMM, slower "
          "than bf16; use --quantize int8 or a Q8_0 GGUF on this GPU";
  p.push_back({"linear, fp8 weights (W8A8)", fp8});
  p.push_back({"linear, int8 weights (W8A16)", "expanded to bf16, then " + cublas});
  p.push_back({"linear, GGUF blocks", "expanded to bf16 (ggml_dequantize kernel), then " + cublas});
  p.push_back({"text decoding GEMV", sm90 ? "bulk-copy (TMA) pipeline (sm_90)" : "register-streaming kernel"});
  p.push_back({"launch overlap", sm90 ? (env_is("ERNIE_PDL", "0") ? "off (ERNIE_PDL=0)" : "programmatic dependent launch")
                                      : "none (programmatic dependent launch needs sm_90 code)"});
#ifdef ERNIE_HAVE_CUDNN
  p.push_back({"conv2d (VAE)", env_is("ERNIE_CONV", "im2col") ? "im2col + cuBLASLt (ERNIE_CONV=im2col)" : "cuDNN"});
#else
  p.push_back({"conv2d (VAE)", "im2col + cuBLASLt (built without cuDNN)"});
#endif
  return p;
}

}  // namespace ernie::cuda
