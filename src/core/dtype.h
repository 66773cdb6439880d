// Element types as stored in checkpoints, with bf16/f16/fp8 <-> f32 conversion on the host.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace ernie {

enum class DType : uint8_t { F32, F16, BF16, F8_E4M3, F8_E5M2, I8, I32, I64, U8, BOOL };

size_t dtype_size(DType t);
const char* dtype_name(DType t);                           // safetensors spelling: "BF16"
std::optional<DType> dtype_from_name(std::string_view s);  // inverse of dtype_name
bool dtype_is_float(DType t);

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {  // round to nearest even, NaN stays NaN
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float fp8_e4m3_to_f32(uint8_t v);
// Nearest e4m3 (ties to even), saturating to ±448 (the "satfinite" conversion of CUDA's cuda_fp8.h and
// Hopper's cvt.rn.satfinite.e4m3x2.f32, so the CPU and CUDA quantizers agree bit for bit); NaN -> 0x7f.
uint8_t f32_to_fp8_e4m3(float f);
inline constexpr float kFp8E4m3Max = 448.f;  // the largest finite e4m3 magnitude
float fp8_e5m2_to_f32(uint8_t v);

// Converts n elements of a float type (F32, F16, BF16, F8_*) to f32.
void convert_to_f32(DType src, const void* in, float* out, size_t n);
// Converts n f32 values to F32, F16 or BF16.
void convert_from_f32(DType dst, const float* in, void* out, size_t n);

}  // namespace ernie
