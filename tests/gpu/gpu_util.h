// Helpers of the GPU tests: skip without a device, the activation dtypes, moving to/from the GPU in a
// given activation dtype (random host tensors: golden.h), and the tolerances of CUDA vs the CPU twin.
#pragma once
#include <gtest/gtest.h>

#include <random>

#include "core/tensor.h"
#include "engine/options.h"
#include "golden.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/ops.h"

namespace ernie::test {

inline const Device kGPU{DeviceKind::CUDA, 0};

// An engine on the GPU in `dt` to compare with the fp32 golden runs: the tiny model, and the DiT fed the fp32
// timesteps the golden run used (the reference in bf16 rounds them: a difference of inputs, not of kernels).
inline EngineOptions golden_run_options(DType dt) {
  EngineOptions o;
  o.model = tiny_model();
  o.device = kGPU.str();
  o.dtype = dtype_name(dt);
  o.round_timesteps = false;
  return o;
}

inline bool have_gpu() {
  static const bool have = cuda::device_count() > 0;
  return have;
}

#define ERNIE_REQUIRE_GPU()                                              \
  do {                                                                   \
    if (!::ernie::test::have_gpu()) GTEST_SKIP() << "no CUDA device";    \
    ::ernie::cuda::set_poison_allocations(true);                         \
  } while (0)

// The activation dtypes of the CUDA backend; FOR_DTYPES { ... } runs a body for each, traced with its name.
inline const DType kDtypes[] = {DType::F32, DType::BF16};
#define FOR_DTYPES                                \
  for (::ernie::DType dt : ::ernie::test::kDtypes) \
    if (::testing::ScopedTrace dtype_trace(__FILE__, __LINE__, dtype_name(dt)); true)

// The host tensor as the GPU will see it in `dt` (bf16 rounding applied), still F32 on the host:
// the CPU twin gets exactly the values the GPU gets.
inline Tensor as_dtype(const Tensor& h, DType dt) { return dt == DType::F32 ? h : h.cast(dt).to_f32(); }
inline Tensor up(const Tensor& h, DType dt) { return h.cast(dt).to(kGPU); }
inline Tensor down(const Tensor& d) { return d.to(kCPU).to_f32(); }

// CUDA vs CPU on identical inputs: f32 differs only by summation order; bf16 by output rounding.
inline double tol(DType dt, double f32 = 2e-5, double bf16 = 1e-2) { return dt == DType::F32 ? f32 : bf16; }
inline double min_cos(DType dt) { return dt == DType::F32 ? 0.999999 : 0.9999; }

}  // namespace ernie::test
