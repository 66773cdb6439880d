// Internal helpers of the CUDA backend: the error-checking macro, the per-device stream, input checks
// with messages that name the op, and element access for F32 / BF16 / F16 data.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/error.h"
#include "core/tensor.h"

namespace ernie::cuda {

[[noreturn]] void throw_cuda_error(const char* call, cudaError_t e, const char* file, int line);

// Every CUDA runtime call goes through this: a failure throws ernie::Error naming the call.
#define ERNIE_CUDA_CHECK(call)                                                                  \
  do {                                                                                          \
    cudaError_t ernie_e_ = (call);                                                              \
    if (ernie_e_ != cudaSuccess) ::ernie::cuda::throw_cuda_error(#call, ernie_e_, __FILE__, __LINE__); \
  } while (0)
// After each kernel launch.
#define ERNIE_CUDA_LAUNCH(name) ERNIE_CUDA_CHECK(cudaPeekAtLastError())

// The GPU model and library versions the tuning cache of `device` is kept under (io/tuning_cache.h).
std::string tuning_identity(int device);

// major * 10 + minor of `device` (read once).
int compute_capability(int device);
// Its streaming multiprocessors (read once).
int sm_count(int device);

// The code of this binary that runs on a device (ops/cuda/arch.cu): `code` is the __CUDA_ARCH__ / 10 the
// runtime loaded (machine code for the device, or PTX compiled just in time), `sm90a` whether it is sm_90a
// code (wgmma, TMA). `error` is set when the binary holds nothing the device can run.
struct CodeArch {
  int cc = 0, code = 0;
  bool sm90a = false;
  std::string error;
};
extern const char* const kBuiltArchs;  // the build's CUDA architectures, "90a-real 80-virtual"
const CodeArch& code_arch(int device);  // probed once per device
bool hopper_code(int device);  // sm_90a code on a compute-capability 9.0 device: the wgmma/TMA kernels run
bool sm90_code(int device);    // sm_90+ code: bulk copies and programmatic dependent launch run

// Makes `device` current and returns its one stream (all work of the backend runs on it, in order).
cudaStream_t stream(int device);

namespace detail {

inline int dev(const Tensor& t) { return t.device().index; }

// An activation: defined, on a CUDA device, F32 or BF16.
void check_act(const Tensor& x, const char* op, const char* what);
// A tensor on the same CUDA device as `x` (weights: F32, BF16 or F16).
void check_same_device(const Tensor& x, const Tensor& t, const char* op, const char* what);
void check_float(const Tensor& t, const char* op, const char* what);
// x [B, ..., C] with a per-row vector v [B or 1, C]; returns the row stride of v (C, or 0 to broadcast).
int64_t row_vector_stride(const Tensor& x, const Tensor& v, const char* op, const char* what);
std::string shapes(const Tensor& a, const Tensor& b);

inline unsigned blocks_for(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  return unsigned(b < 1 ? 1 : (b > 65535LL * 32 ? 65535LL * 32 : b));
}

}  // namespace detail

// ---- device-side element access ---------------------------------------------------------------------------
enum ElemType : int { kF32 = 0, kBF16 = 1, kF16 = 2 };
ElemType elem_type(DType t, const char* op);  // throws for non-float storage

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
template <class T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16(v); }
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half(v); }

#ifdef __CUDACC__
__device__ __forceinline__ float silu_f(float v) { return v / (1.f + __expf(-v)); }
__device__ __forceinline__ float gelu_f(float v) { return 0.5f * v * (1.f + erff(v * 0.70710678118654752440f)); }

// Sum over the 32 lanes of a warp, every lane gets it.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
#endif

// A read-only vector of any float storage type (weights, biases, per-row modulation vectors), read as
// float. The type switch is uniform across a warp.
struct VecF {
  const void* p = nullptr;
  int type = kF32;
  __device__ __forceinline__ float operator[](int64_t i) const {
    if (type == kF32) return static_cast<const float*>(p)[i];
    if (type == kBF16) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    return __half2float(static_cast<const __half*>(p)[i]);
  }
  __device__ __forceinline__ bool defined() const { return p != nullptr; }
};
VecF vec(const Tensor& t);  // undefined tensor -> null vector

// 16-byte packs for vectorised memory-bound kernels: 8 bf16 or 4 f32 per load/store.
template <class T>
inline constexpr int kPack = int(16 / sizeof(T));
template <class T>
struct alignas(16) Pack {
  T v[kPack<T>];
};
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

#ifdef __CUDACC__
// rsqrt(mean(x²) + eps) over one row of `cp` 16-byte packs, read by one warp (every lane gets it).
template <class T>
__device__ __forceinline__ float row_inv_rms(const Pack<T>* __restrict__ xr, int cp, float eps) {
  float ss = 0.f;
  for (int i = threadIdx.x; i < cp; i += 32) {
    const Pack<T> a = xr[i];
#pragma unroll
    for (int e = 0; e < kPack<T>; ++e) {
      const float v = to_f(a.v[e]);
      ss += v * v;
    }
  }
  return rsqrtf(warp_sum(ss) / float(cp * kPack<T>) + eps);
}
#endif

}  // namespace ernie::cuda

// Runs `body` with `T` bound to the C++ type of activation dtype `dt` (F32 or BF16).
#define ERNIE_DISPATCH_ACT(dt, op, ...)                                                      \
  do {                                                                                       \
    if ((dt) == ::ernie::DType::F32) {                                                       \
      using T = float;                                                                       \
      __VA_ARGS__;                                                                           \
    } else if ((dt) == ::ernie::DType::BF16) {                                               \
      using T = __nv_bfloat16;                                                               \
      __VA_ARGS__;                                                                           \
    } else {                                                                                 \
      ::ernie::fail(op, ": unsupported activation dtype ", ::ernie::dtype_name(dt));         \
    }                                                                                        \
  } while (0)
