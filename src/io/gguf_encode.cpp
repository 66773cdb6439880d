#include "io/gguf_encode.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "core/ggml_blocks.h"

namespace ernie {

namespace {

void put_half(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  p[0] = uint8_t(h), p[1] = uint8_t(h >> 8);
}
float stored_half(float v) { return f16_to_f32(f32_to_f16(v)); }
int clamp_round(float v, int lo, int hi) { return std::clamp(int(std::nearbyint(v)), lo, hi); }

void q8_0(const float* x, uint8_t* out) {
  float amax = 0.f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = stored_half(amax / 127.f), id = d > 0.f ? 1.f / d : 0.f;
  put_half(out, d);
  for (int j = 0; j < 32; ++j) out[2 + j] = uint8_t(int8_t(clamp_round(x[j] * id, -127, 127)));
}

// Q4_K / Q5_K: eight sub-blocks of 32 with a 6-bit scale and minimum each: x ≈ d·ls·q - dmin·lm, q in
// 0..levels. Fills the block header (d, dmin, the 12 packed scale bytes) and q[256].
void k_affine(const float* x, int levels, uint8_t* out, int* q) {
  float scale[8], minimum[8], dmax = 0.f, mmax = 0.f;
  for (int j = 0; j < 8; ++j) {
    float lo = 0.f, hi = x[32 * j];
    for (int l = 0; l < 32; ++l) lo = std::min(lo, x[32 * j + l]), hi = std::max(hi, x[32 * j + l]);
    scale[j] = (std::max(hi, lo) - lo) / float(levels), minimum[j] = -lo;
    dmax = std::max(dmax, scale[j]), mmax = std::max(mmax, minimum[j]);
  }
  const float d = stored_half(dmax / 63.f), dmin = stored_half(mmax / 63.f);
  put_half(out, d);
  put_half(out + 2, dmin);
  uint8_t* s = out + 4;
  std::memset(s, 0, 12);
  for (int j = 0; j < 8; ++j) {
    // The minimum rounds up, so that d·ls·q - dmin·lm still reaches the sub-block's smallest value.
    const int ls = d > 0.f ? clamp_round(scale[j] / d, 0, 63) : 0;
    const int lm = dmin > 0.f ? std::clamp(int(std::ceil(minimum[j] / dmin)), 0, 63) : 0;
    if (j < 4) {
      s[j] = uint8_t(ls), s[j + 4] = uint8_t(lm);
    } else {
      s[j + 4] = uint8_t((ls & 15) | ((lm & 15) << 4));
      s[j - 4] |= uint8_t((ls >> 4) << 6);
      s[j] |= uint8_t((lm >> 4) << 6);
    }
    const float step = d * float(ls), offset = dmin * float(lm);
    for (int l = 0; l < 32; ++l) q[32 * j + l] = step > 0.f ? clamp_round((x[32 * j + l] + offset) / step, 0, levels) : 0;
  }
}

void q4_k(const float* x, uint8_t* out) {
  int q[256];
  k_affine(x, 15, out, q);
  uint8_t* qs = out + 16;
  for (int g = 0; g < 8; g += 2)
    for (int l = 0; l < 32; ++l) qs[(g / 2) * 32 + l] = uint8_t(q[32 * g + l] | (q[32 * (g + 1) + l] << 4));
}

void q5_k(const float* x, uint8_t* out) {
  int q[256];
  k_affine(x, 31, out, q);
  uint8_t* qh = out + 16;
  uint8_t* qs = out + 48;
  std::memset(qh, 0, 32);
  for (int g = 0; g < 8; ++g)
    for (int l = 0; l < 32; ++l) {
      const int v = q[32 * g + l];
      if (g % 2 == 0) qs[(g / 2) * 32 + l] = uint8_t(v & 15);
      else qs[(g / 2) * 32 + l] |= uint8_t((v & 15) << 4);
      qh[l] |= uint8_t(((v >> 4) & 1) << g);
    }
}

// Q6_K: sixteen sub-blocks of 16 with a signed 8-bit scale each: x ≈ d·sc·q, q in -32..31 (stored + 32).
void q6_k(const float* x, uint8_t* out) {
  float scale[16], smax = 0.f;
  for (int i = 0; i < 16; ++i) {
    float amax = 0.f;
    for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * i + l]));
    scale[i] = amax / 31.f, smax = std::max(smax, scale[i]);
  }
  const float d = stored_half(smax / 127.f);
  uint8_t* ql = out;
  uint8_t* qh = out + 128;
  int8_t* sc = reinterpret_cast<int8_t*>(out + 192);
  std::memset(out, 0, 192);
  put_half(out + 208, d);
  for (int i = 0; i < 16; ++i) sc[i] = int8_t(d > 0.f ? clamp_round(scale[i] / d, 0, 127) : 0);
  for (int e = 0; e < 256; ++e) {
    const float step = d * float(sc[e / 16]);
    const int v = (step > 0.f ? clamp_round(x[e] / step, -32, 31) : 0) + 32;
    const int half = e / 128, k = (e % 128) / 32, l = e % 32;
    ql[half * 64 + (k % 2) * 32 + l] |= uint8_t((v & 15) << (k < 2 ? 0 : 4));
    qh[half * 32 + l] |= uint8_t((v >> 4) << (2 * k));
  }
}

}  // namespace

int ggml_output_type(const std::string& name) {
  if (name == "f32") return 0;
  if (name == "f16") return 1;
  if (name == "q8_0") return 8;
  if (name == "q4_k") return 12;
  if (name == "q5_k") return 13;
  if (name == "q6_k") return 14;
  if (name == "bf16") return 30;
  return -1;
}

void ggml_encode(int type, const float* x, int64_t n, uint8_t* out) {
  void (*encode)(const float*, uint8_t*) = nullptr;
  int block = 0, bytes = 0;
  switch (type) {
    case 8: encode = q8_0, block = ggml::Q8_0::block, bytes = ggml::Q8_0::bytes; break;
    case 12: encode = q4_k, block = ggml::Q4_K::block, bytes = ggml::Q4_K::bytes; break;
    case 13: encode = q5_k, block = ggml::Q5_K::block, bytes = ggml::Q5_K::bytes; break;
    case 14: encode = q6_k, block = ggml::Q6_K::block, bytes = ggml::Q6_K::bytes; break;
    default: fail("GGUF: no encoder for GGML type ", std::to_string(type));
  }
  ERNIE_CHECK(n % block == 0, "GGUF: ", std::to_string(n), " values are not whole blocks of ", std::to_string(block));
  const int64_t blocks = n / block;
#pragma omp parallel for schedule(static) if (blocks > 64)
  for (int64_t b = 0; b < blocks; ++b) encode(x + b * block, out + b * bytes);
}

}  // namespace ernie
