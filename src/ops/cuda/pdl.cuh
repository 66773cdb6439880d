// Programmatic dependent launch (Hopper), opt-in with ERNIE_PDL=1: a kernel launched with launch_kernel(pdl =
// true, ...) may be scheduled while the previous kernel on the stream still runs, once every block of that
// kernel has called pdl_launch_dependents() (or exited). It must call pdl_wait() before it touches any memory
// another kernel writes (its inputs, and its outputs: their blocks may have just been freed by the host);
// before that it may only read memory that stays constant, such as weights (prefetch_l2). Both calls are
// no-ops in kernels launched without it. Decoding uses it so a GEMV's weights stream into L2 while the small
// kernel before it (a norm, attention) runs.
#pragma once
#include <cstdlib>
#include <cstring>
#include <utility>

#include "ops/cuda/common.h"

namespace ernie::cuda {

inline bool pdl_enabled() {
  const char* e = std::getenv("ERNIE_PDL");
  return e && std::strcmp(e, "1") == 0;
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
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
// Asks L2 to fetch [p, p + bytes) (16-byte aligned, bytes a multiple of 16); a hint, nothing waits for it.
__device__ __forceinline__ void prefetch_l2(const void* p, unsigned bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}
#endif

}  // namespace ernie::cuda
