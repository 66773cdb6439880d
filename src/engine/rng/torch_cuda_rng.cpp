#include "engine/rng/torch_cuda_rng.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ernie {

void philox4x32_10(const uint32_t c[4], const uint32_t k[2], uint32_t out[4]) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  uint32_t x0 = c[0], x1 = c[1], x2 = c[2], x3 = c[3], k0 = k[0], k1 = k[1];
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = uint64_t(M0) * x0, p1 = uint64_t(M1) * x2;
    const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0), hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    x0 = hi1 ^ x1 ^ k0;
    x1 = lo1;
    x2 = hi0 ^ x3 ^ k1;
    x3 = lo0;
    k0 += W0;
    k1 += W1;
  }
  out[0] = x0;
  out[1] = x1;
  out[2] = x2;
  out[3] = x3;
}

namespace {

// curand's _curand_box_muller: u in (0, 1], v in (0, 2 pi]; (sin v, cos v) * sqrt(-2 log u). The device code
// computes u and v with one fused multiply-add each.
void box_muller(uint32_t a, uint32_t b, float* out) {
  constexpr float kInv = 2.3283064365386963e-10f;         // 2^-32
  constexpr float kInv2Pi = 2.3283064365386963e-10f * 6.2831855f;  // CURAND_2POW32_INV_2PI
  const float u = std::fma(float(a), kInv, kInv / 2.0f);
  const float v = std::fma(float(b), kInv2Pi, kInv2Pi / 2.0f);
  const float s = std::sqrt(-2.0f * std::log(u));
  out[0] = std::sin(v) * s;
  out[1] = std::cos(v) * s;
}

}  // namespace

std::vector<float> torch_cuda_randn(int64_t n, uint64_t seed, DType dtype, int max_blocks) {
  ERNIE_CHECK(dtype == DType::F32 || dtype == DType::BF16, "torch cuda randn: dtype ", dtype_name(dtype),
              " is not f32 or bf16");
  ERNIE_CHECK(n >= 0 && max_blocks >= 1, "torch cuda randn: bad size or grid");
  std::vector<float> out(static_cast<size_t>(n));
  if (n == 0) return out;
  constexpr int64_t kBlock = 256, kUnroll = 4;
  const int64_t blocks = std::min<int64_t>((n + kBlock - 1) / kBlock, max_blocks);
  const int64_t stride = blocks * kBlock;
  const int64_t passes = (n - 1) / (stride * kUnroll) + 1;
  const uint32_t key[2] = {uint32_t(seed), uint32_t(seed >> 32)};
  for (int64_t idx = 0; idx < stride; ++idx) {
    for (int64_t p = 0; p < passes; ++p) {
      // curand_init(seed, idx, 0): counter (pass, 0, idx lo, idx hi)
      const uint32_t ctr[4] = {uint32_t(p), uint32_t(uint64_t(p) >> 32), uint32_t(idx), uint32_t(uint64_t(idx) >> 32)};
      uint32_t r[4];
      philox4x32_10(ctr, key, r);
      float v[4];
      box_muller(r[0], r[1], v);
      box_muller(r[2], r[3], v + 2);
      for (int k = 0; k < 4; ++k) {
        const int64_t li = idx + stride * (kUnroll * p + k);
        if (li < n) out[size_t(li)] = dtype == DType::BF16 ? round_bf16(v[k]) : v[k];
      }
    }
  }
  return out;
}

}  // namespace ernie
