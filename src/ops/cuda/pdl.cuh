// Programmatic dependent launch (Hopper): a kernel launched with launch_kernel(pdl =
// true, ...) may be scheduled while the previous kernel on the stream still runs, once every block of that
// kernel has called pdl_launch_dependents() (or exited). It must call pdl_wait() before it touches any memory
// another kernel writes (its inputs, and its outputs: their blocks may have just been freed by the host).
// Both calls are no-ops in kernels launched without it. The decode-step kernels (GEMV, add_rms_norm,
// qkv_rope, decode attention) use it so the next kernel's launch and block scheduling overlap the current
// one's tail instead of following it.
#pragma once
#include <cstdlib>
#include <cstring>
#include <utility>

#include "ops/cuda/common.h"

namespace ernie::cuda {

// On by default where sm_90+ code runs (a compute_80 build JIT-compiled on a Hopper GPU has no griddepcontrol
// in its kernels, so it must not launch them this way); ERNIE_PDL=0 turns it off (for measuring).
inline bool pdl_enabled(int device) {
  static const bool off = [] {
    const char* e = std::getenv("ERNIE_PDL");
    return e && std::strcmp(e, "0") == 0;
  }();
  return !off && sm90_code(device);
}

template <class... Params, class... Args>
void launch_kernel(bool pdl, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                   Args&&... args) {
  if (!pdl) {
    kernel<<<grid, block, smem, st>>>(std::forward<Args>(args)...);
    return;
  }
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = st;
  cfg.attrs = &attr, cfg.numAttrs = 1;
  ERNIE_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

#ifdef __CUDACC__
// griddepcontrol is an sm_90 instruction: older code (compute_80 PTX) gets no-ops, and pdl_enabled is false
// wherever that code runs.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
#endif

}  // namespace ernie::cuda
