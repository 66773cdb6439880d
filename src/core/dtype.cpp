#include "core/dtype.h"

#include <cmath>

#include "core/error.h"

namespace ernie {

namespace {
struct Info {
  DType t;
  const char* name;
  size_t size;
  bool is_float;
};
constexpr Info kInfo[] = {
    {DType::F32, "F32", 4, true},          {DType::F16, "F16", 2, true},
    {DType::BF16, "BF16", 2, true},        {DType::F8_E4M3, "F8_E4M3", 1, true},
    {DType::F8_E5M2, "F8_E5M2", 1, true},  {DType::I8, "I8", 1, false},
    {DType::I32, "I32", 4, false},         {DType::I64, "I64", 8, false},
    {DType::U8, "U8", 1, false},           {DType::BOOL, "BOOL", 1, false},
};
const Info& info(DType t) { return kInfo[static_cast<int>(t)]; }
}  // namespace

size_t dtype_size(DType t) { return info(t).size; }
const char* dtype_name(DType t) { return info(t).name; }
bool dtype_is_float(DType t) { return info(t).is_float; }

std::optional<DType> dtype_from_name(std::string_view s) {
  for (const Info& i : kInfo)
    if (s == i.name) return i.t;
  return std::nullopt;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float f;
  if (exp == 0) {
    f = std::ldexp(float(man), -24);
  } else if (exp == 31) {
    f = man ? NAN : INFINITY;
  } else {
    f = std::ldexp(float(man | 0x400), int(exp) - 25);
  }
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u |= sign;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t sign = uint16_t((u >> 16) & 0x8000);
  float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00;
  if (a >= 65520.f) return sign | 0x7c00;
  if (a < 6.103515625e-05f) {  // subnormal: multiples of 2^-24, round to nearest even
    return sign | uint16_t(std::nearbyint(a * 16777216.f));
  }
  int e;
  float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5,1)
  uint32_t man = uint32_t(std::nearbyint((m * 2.f - 1.f) * 1024.f));
  int exp = e - 1 + 15;
  if (man == 1024) { man = 0; ++exp; }
  if (exp >= 31) return sign | 0x7c00;
  return sign | uint16_t(exp << 10) | uint16_t(man);
}

float fp8_e4m3_to_f32(uint8_t v) {
  int sign = v >> 7, exp = (v >> 3) & 0xf, man = v & 7;
  float f;
  if (exp == 0xf && man == 7) return NAN;
  if (exp == 0) f = std::ldexp(float(man), -9);
  else f = std::ldexp(float(man | 8), exp - 10);
  return sign ? -f : f;
}

uint8_t f32_to_fp8_e4m3(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint8_t sign = uint8_t((u >> 24) & 0x80);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return sign | 0x7f;     // NaN
  if (u >= 0x43e00000u) return sign | 0x7e;    // >= 448 (and inf): saturate
  if (u < 0x3c800000u) {                       // below 2^-6: subnormal steps of 2^-9, exact in float
    float a;
    std::memcpy(&a, &u, 4);
    return sign | uint8_t(std::nearbyint(a * 512.f));  // 8 = the smallest normal, encoded the same way
  }
  u += 0x7ffffu + ((u >> 20) & 1u);            // round the 23-bit mantissa to 3 bits, ties to even
  return sign | uint8_t((u >> 20) - (120u << 3));  // rebias the exponent 127 -> 7
}

float fp8_e5m2_to_f32(uint8_t v) { return f16_to_f32(uint16_t(v) << 8); }

void convert_to_f32(DType src, const void* in, float* out, size_t n) {
  if (n == 0) return;  // empty tensors may have no storage at all (null pointers)
  switch (src) {
    case DType::F32: std::memcpy(out, in, n * 4); return;
    case DType::BF16: {
      auto p = static_cast<const uint16_t*>(in);
      for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(p[i]);
      return;
    }
    case DType::F16: {
      auto p = static_cast<const uint16_t*>(in);
      for (size_t i = 0; i < n; ++i) out[i] = f16_to_f32(p[i]);
      return;
    }
    case DType::F8_E4M3: {
      auto p = static_cast<const uint8_t*>(in);
      for (size_t i = 0; i < n; ++i) out[i] = fp8_e4m3_to_f32(p[i]);
      return;
    }
    case DType::F8_E5M2: {
      auto p = static_cast<const uint8_t*>(in);
      for (size_t i = 0; i < n; ++i) out[i] = fp8_e5m2_to_f32(p[i]);
      return;
    }
    default: fail("cannot convert ", dtype_name(src), " to F32");
  }
}

void convert_from_f32(DType dst, const float* in, void* out, size_t n) {
  if (n == 0) return;
  switch (dst) {
    case DType::F32: std::memcpy(out, in, n * 4); return;
    case DType::BF16: {
      auto p = static_cast<uint16_t*>(out);
      for (size_t i = 0; i < n; ++i) p[i] = f32_to_bf16(in[i]);
      return;
    }
    case DType::F16: {
      auto p = static_cast<uint16_t*>(out);
      for (size_t i = 0; i < n; ++i) p[i] = f32_to_f16(in[i]);
      return;
    }
    default: fail("cannot convert F32 to ", dtype_name(dst));
  }
}

}  // namespace ernie
