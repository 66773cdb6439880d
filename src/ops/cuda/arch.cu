// What code of this binary runs on a device: a one-thread probe kernel reports the __CUDA_ARCH__ the runtime
// loaded for it (machine code built for the device, or PTX compiled just in time) and whether that code is
// sm_90a's (wgmma/TMA). Every translation unit is built for the same architecture list, so the probe's answer
// holds for every kernel. The dispatchers ask it before they pick an architecture-specific kernel.
#include <cstdio>
#include <map>
#include <mutex>

#include "ops/cuda/common.h"
#include "ops/cuda/cuda_ops.h"

namespace ernie::cuda {

namespace {

__global__ void probe_kernel(int* out) {
#ifdef __CUDA_ARCH__
  out[0] = __CUDA_ARCH__;
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  out[1] = 1;
#endif
#endif
}

CodeArch probe(int device) {
  CodeArch a;
  int major = 0, minor = 0;
  ERNIE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  ERNIE_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  a.cc = major * 10 + minor;
  int prev = 0;
  ERNIE_CUDA_CHECK(cudaGetDevice(&prev));
  ERNIE_CUDA_CHECK(cudaSetDevice(device));
  int* d = nullptr;
  int h[2] = {0, 0};
  cudaError_t e = cudaMalloc(&d, sizeof h);
  if (e == cudaSuccess) e = cudaMemset(d, 0, sizeof h);
  if (e == cudaSuccess) {
    probe_kernel<<<1, 1>>>(d);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  if (d) cudaFree(d);
  cudaSetDevice(prev);
  if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidPtx || e == cudaErrorUnsupportedPtxVersion) {
    cudaGetLastError();
    a.error = std::string("this build holds no code that runs on compute capability ") + std::to_string(major) + "." +
              std::to_string(minor) + " (built for " + kBuiltArchs + "; " + cudaGetErrorString(e) +
              "): rebuild with -DERNIE_CUDA_ARCHS=all, or use --device cpu";
    return a;
  }
  if (e != cudaSuccess) throw_cuda_error("the architecture probe", e, __FILE__, __LINE__);
  a.code = h[0] / 10;
  a.sm90a = h[1] == 1;
  return a;
}

}  // namespace

const char* const kBuiltArchs = ERNIE_CUDA_ARCH_LIST;

const CodeArch& code_arch(int device) {
  static std::mutex mu;
  static std::map<int, CodeArch> archs;
  std::lock_guard<std::mutex> lk(mu);
  auto it = archs.find(device);
  if (it == archs.end()) it = archs.emplace(device, probe(device)).first;
  return it->second;
}

bool hopper_code(int device) {
  const CodeArch& a = code_arch(device);
  return a.cc == 90 && a.sm90a;
}

bool sm90_code(int device) { return code_arch(device).code >= 90; }

}  // namespace ernie::cuda
