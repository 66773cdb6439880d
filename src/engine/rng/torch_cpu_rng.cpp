#include "engine/rng/torch_cpu_rng.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "core/error.h"

namespace ernie {
namespace {

constexpr double kPi = 3.14159265358979323846;

// The f32 vectorised path (normal_fill_16_AVX2) takes its log and sincos from avx_mathfun.h (Cephes' single
// precision polynomials, as sse_mathfun by J. Pommier). Scalar twins, one float rounding per operation in the
// same order, so the values match bit for bit.
uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// log for x > 0 (the uniforms here are in (0, 1]).
float cephes_logf(float x) {
  x = std::max(x, from_bits(0x00800000u));  // no denormals
  const int32_t exponent = int32_t(bits(x) >> 23) - 0x7f;
  x = from_bits((bits(x) & ~0x7f800000u) | bits(0.5f));  // mantissa in [0.5, 1)
  float e = float(exponent) + 1.0f;
  const bool below = x < 0.707106781186547524f;  // SQRTHF
  const float tmp = below ? x : 0.0f;
  x = x - 1.0f;
  if (below) e = e - 1.0f;
  x = x + tmp;
  const float z = x * x;
  static const float p[9] = {7.0376836292E-2f,  -1.1514610310E-1f, 1.1676998740E-1f,
                             -1.2420140846E-1f, 1.4249322787E-1f,  -1.6668057665E-1f,
                             2.0000714765E-1f,  -2.4999993993E-1f, 3.3333331174E-1f};
  float y = p[0];
  for (int k = 1; k < 9; ++k) y = std::fma(y, x, p[k]);
  y = y * x;
  y = std::fma(y, z, e * -2.12194440e-4f);
  y = std::fma(-z, 0.5f, y);
  x = x + y;
  x = std::fma(e, 0.693359375f, x);
  return x;
}

// sin and cos together (sincos256_ps).
void cephes_sincosf(float xin, float* s, float* c) {
  const uint32_t sign_in = bits(xin) & 0x80000000u;
  float x = from_bits(bits(xin) & 0x7fffffffu);
  float y = x * 1.27323954473516f;  // 4 / pi
  int32_t j = int32_t(y);           // truncation
  j = (j + 1) & ~1;
  y = float(j);
  const uint32_t swap_sign_sin = uint32_t(j & 4) << 29;
  const bool poly_mask = (j & 2) == 0;
  const uint32_t sign_cos = uint32_t(~(j - 2) & 4) << 29;
  const uint32_t sign_sin = sign_in ^ swap_sign_sin;
  // extended precision modular arithmetic: x = ((x - y DP1) - y DP2) - y DP3
  x = std::fma(y, -0.78515625f, x);
  x = std::fma(y, -2.4187564849853515625e-4f, x);
  x = std::fma(y, -3.77489497744594108e-8f, x);
  const float z = x * x;
  float yc = std::fma(2.443315711809948E-005f, z, -1.388731625493765E-003f);  // cos polynomial, |x| <= pi/4
  yc = std::fma(yc, z, 4.166664568298827E-002f);
  yc = yc * z;
  yc = std::fma(yc, z, -(z * 0.5f));
  yc = yc + 1.0f;
  float ys = std::fma(-1.9515295891E-4f, z, 8.3321608736E-3f);  // sin polynomial
  ys = std::fma(ys, z, -1.6666654611E-1f);
  ys = ys * z;
  ys = std::fma(ys, x, x);
  const float ysin2 = poly_mask ? ys : 0.0f, ysin1 = poly_mask ? 0.0f : yc;
  const float sin_v = ysin1 + ysin2, cos_v = (yc - ysin1) + (ys - ysin2);
  *s = from_bits(bits(sin_v) ^ sign_sin);
  *c = from_bits(bits(cos_v) ^ sign_cos);
}

// normal_fill_16_AVX2: f32.
void normal_fill_16_f32(float* data) {
  const float two_pi = float(2.0 * kPi);
  for (int j = 0; j < 8; ++j) {
    const float u1 = 1.0f - data[j], u2 = data[j + 8];
    const float radius = std::sqrt(-2.0f * cephes_logf(u1));
    const float theta = two_pi * u2;
    float sn, cs;
    cephes_sincosf(theta, &sn, &cs);
    data[j] = radius * cs + 0.0f;  // fmadd(n, std 1, mean 0)
    data[j + 8] = radius * sn + 0.0f;
  }
}

// normal_fill_16<BFloat16>: each operation in float, rounded to bf16; log, sqrt, sin, cos from libm.
void normal_fill_16_bf16(float* data) {
  auto r = [](float x) { return round_bf16(x); };
  for (int j = 0; j < 8; ++j) {
    const float u1 = r(1.0f - data[j]);  // [0, 1) -> (0, 1] for the log
    const float u2 = data[j + 8];
    const float radius = r(std::sqrt(r(-2.0f * r(std::log(u1)))));
    const float theta = r(float(2.0 * kPi * double(u2)));  // 2.0f * pi<double> * u2, stored as bf16
    // radius * cos(theta) * std + mean with std 1, mean 0 (the + 0 turns -0 into +0, as torch's does)
    data[j] = r(radius * r(std::cos(theta))) + 0.0f;
    data[j + 8] = r(radius * r(std::sin(theta))) + 0.0f;
  }
}

}  // namespace

std::vector<float> torch_cpu_randn(int64_t n, uint64_t seed, DType dtype) {
  ERNIE_CHECK(dtype == DType::F32 || dtype == DType::BF16, "torch cpu randn: dtype ", dtype_name(dtype),
              " is not f32 or bf16");
  ERNIE_CHECK(n >= 0, "torch cpu randn: negative size");
  std::mt19937 engine(uint32_t(seed & 0xffffffffu));  // at::mt19937: the seed's low 32 bits
  std::vector<float> out(static_cast<size_t>(n));
  const bool bf16 = dtype == DType::BF16;
  auto fill16 = [&](float* d) { bf16 ? normal_fill_16_bf16(d) : normal_fill_16_f32(d); };
  if (n >= 16) {
    const int digits = bf16 ? 8 : 24;
    const uint32_t mask = (uint32_t(1) << digits) - 1;
    const float divisor = 1.0f / float(uint32_t(1) << digits);
    auto uniform = [&] { return float(engine() & mask) * divisor; };  // exact
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = uniform();
    for (int64_t i = 0; i + 16 <= n; i += 16) fill16(out.data() + i);
    if (n % 16 != 0) {  // recompute the last 16 values from fresh uniforms
      float* d = out.data() + n - 16;
      for (int i = 0; i < 16; ++i) d[i] = uniform();
      fill16(d);
    }
    return out;
  }
  // at::normal_distribution<double>, one cached second value
  auto uniform53 = [&] {
    const uint64_t hi = engine(), lo = engine();
    return double(((hi << 32) | lo) & ((uint64_t(1) << 53) - 1)) * (1.0 / double(uint64_t(1) << 53));
  };
  bool cached = false;
  double next = 0;
  for (int64_t i = 0; i < n; ++i) {
    double v;
    if (cached) {
      v = next;
      cached = false;
    } else {
      const double u1 = uniform53(), u2 = uniform53();
      const double r = std::sqrt(-2.0 * std::log1p(-u2)), theta = 2.0 * kPi * u1;
      next = r * std::sin(theta);
      cached = true;
      v = r * std::cos(theta);
    }
    out[size_t(i)] = bf16 ? round_bf16(float(v)) : float(v);
  }
  return out;
}

}  // namespace ernie
