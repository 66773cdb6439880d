// The per-element and per-row arithmetic the CPU ops share, so that a fused op (cpu/fused_fp8.cpp) computes
// bit for bit what the composition of the separate ops computes.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/dtype.h"

namespace ernie::cpu::detail {

inline float silu_f(float v) { return v / (1.f + std::exp(-v)); }
inline float gelu_f(float v) { return float(0.5 * v * (1.0 + std::erf(v * 0.70710678118654752440))); }

// rms_norm of one row a[c] into o (o may be a): a · rsqrt(mean(a²) + eps) · w (w null: no affine);
// double accumulation of the sum of squares.
inline void rms_norm_row(const float* a, int64_t c, const float* w, float eps, float* o) {
  double ss = 0;
  for (int64_t i = 0; i < c; ++i) ss += double(a[i]) * a[i];
  const float inv = float(1.0 / std::sqrt(ss / double(c) + double(eps)));
  for (int64_t i = 0; i < c; ++i) o[i] = a[i] * inv * (w ? w[i] : 1.f);
}

// AdaLN modulation of one element.
inline float modulate_f(float x, float shift, float scale) { return x * (1.f + scale) + shift; }

// Row-wise symmetric quantization of one row[cols] to `qt` (I8 or F8_E4M3, qmax 127 or 448) into codes;
// returns the row's scale s = max|row| / qmax (1 for an all-zero row), or `fixed` when it is positive (a static
// scale: no maximum taken). Codes are row · (1 / s) rounded to nearest even (I8 clamped to ±127, F8_E4M3
// saturating): one division per row, not per element (the CUDA kernels do the same float operations, so
// codes match).
inline float quantize_row(DType qt, const float* row, int64_t cols, float qmax, void* codes, float fixed = 0.f) {
  float s = fixed;
  if (s <= 0.f) {
    float amax = 0.f;
    for (int64_t c = 0; c < cols; ++c) amax = std::fmax(amax, std::fabs(row[c]));
    s = amax > 0.f ? amax / qmax : 1.f;
  }
  const float inv = 1.f / s;
  if (qt == DType::F8_E4M3) {
    uint8_t* dst = static_cast<uint8_t*>(codes);
    for (int64_t c = 0; c < cols; ++c) dst[c] = f32_to_fp8_e4m3(row[c] * inv);
  } else {
    int8_t* dst = static_cast<int8_t*>(codes);
    for (int64_t c = 0; c < cols; ++c) dst[c] = int8_t(std::nearbyint(std::fmax(-127.f, std::fmin(127.f, row[c] * inv))));
  }
  return s;
}

}  // namespace ernie::cpu::detail
