// The GGML block-quantized formats, one 32-element group at a time: each type's block geometry and its
// de-quantizer, written once for the host (core/ggml_types.cpp, the reference) and the GPU
// (ops/cuda/ggml_dequantize.cu). Layouts as ggml defines them (ggml-common.h); each decoder multiplies in
// the order of ggml's reference de-quantizer (ggml-quants.c), and both users compile it without FMA
// contraction, so the two agree bit for bit.
//
// A type is a struct: `block` elements take `bytes` bytes, and group(in, g, out) writes elements
// g·32 .. g·32+31 of the block at `in` to out[0..31] (g < block / 32).
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define ERNIE_HD __host__ __device__ __forceinline__
#else
#define ERNIE_HD inline
#endif

namespace ernie::ggml {

// An IEEE half at p (little-endian), exactly.
ERNIE_HD float half_at(const uint8_t* p) {
  const uint32_t h = uint32_t(p[0]) | uint32_t(p[1]) << 8;
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 31u, man = h & 1023u;
  if (exp == 0) {  // zero or subnormal: man · 2^-24, exact in float
    const float v = float(man) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  const uint32_t bits = sign | (exp == 31 ? 0x7f800000u | man << 13 : (exp + 112) << 23 | man << 13);
#ifdef __CUDA_ARCH__
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}
ERNIE_HD uint32_t u32_at(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// The non-linear 4-bit codebook of IQ4_NL and IQ4_XS {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38,
// 53, 69, 89, 113}, as two words of bytes so that host and device code read the same constant.
ERNIE_HD float iq4_value(int i) {
  const uint64_t word = i < 8 ? 0xf6eaddcfbfad9881ull : 0x7159453526190d01ull;
  return float(int8_t(uint8_t(word >> (8 * (i & 7)))));
}

// ---- 32-element blocks: low nibbles hold elements 0..15, high nibbles 16..31 --------------------------------

struct Q4_0 {  // d f16, 16 bytes of nibbles; (q - 8) · d
  static constexpr int block = 32, bytes = 18;
  ERNIE_HD static void group(const uint8_t* in, int, float* out) {
    const float d = half_at(in);
    const uint8_t* q = in + 2;
    for (int j = 0; j < 16; ++j) {
      out[j] = float(int(q[j] & 15) - 8) * d;
      out[j + 16] = float(int(q[j] >> 4) - 8) * d;
    }
  }
};

struct Q4_1 {  // d, m f16, nibbles; q · d + m
  static constexpr int block = 32, bytes = 20;
  ERNIE_HD static void group(const uint8_t* in, int, float* out) {
    const float d = half_at(in), m = half_at(in + 2);
    const uint8_t* q = in + 4;
    for (int j = 0; j < 16; ++j) {
      out[j] = float(q[j] & 15) * d + m;
      out[j + 16] = float(q[j] >> 4) * d + m;
    }
  }
};

// The fifth bit of element j (0..31) is bit j of the 32-bit little-endian `high`.
struct Q5_0 {  // d f16, high bits u32, nibbles; (q - 16) · d
  static constexpr int block = 32, bytes = 22;
  ERNIE_HD static void group(const uint8_t* in, int, float* out) {
    const float d = half_at(in);
    const uint32_t high = u32_at(in + 2);
    const uint8_t* q = in + 6;
    for (int j = 0; j < 16; ++j) {
      const int lo = int((q[j] & 15) | (((high >> j) & 1) << 4));
      const int hi = int((q[j] >> 4) | (((high >> (j + 16)) & 1) << 4));
      out[j] = float(lo - 16) * d;
      out[j + 16] = float(hi - 16) * d;
    }
  }
};

struct Q5_1 {  // d, m f16, high bits u32, nibbles; q · d + m
  static constexpr int block = 32, bytes = 24;
  ERNIE_HD static void group(const uint8_t* in, int, float* out) {
    const float d = half_at(in), m = half_at(in + 2);
    const uint32_t high = u32_at(in + 4);
    const uint8_t* q = in + 8;
    for (int j = 0; j < 16; ++j) {
      const unsigned lo = (q[j] & 15u) | (((high >> j) & 1u) << 4);
      const unsigned hi = (q[j] >> 4) | (((high >> (j + 16)) & 1u) << 4);
      out[j] = float(lo) * d + m;
      out[j + 16] = float(hi) * d + m;
    }
  }
};

struct Q8_0 {  // d f16, 32 int8; q · d
  static constexpr int block = 32, bytes = 34;
  ERNIE_HD static void group(const uint8_t* in, int, float* out) {
    const float d = half_at(in);
    for (int j = 0; j < 32; ++j) out[j] = float(int8_t(in[2 + j])) * d;
  }
};

struct IQ4_NL {  // d f16, nibbles indexing the codebook
  static constexpr int block = 32, bytes = 18;
  ERNIE_HD static void group(const uint8_t* in, int, float* out) {
    const float d = half_at(in);
    const uint8_t* q = in + 2;
    for (int j = 0; j < 16; ++j) {
      out[j] = d * iq4_value(q[j] & 15);
      out[j + 16] = d * iq4_value(q[j] >> 4);
    }
  }
};

// ---- 256-element super-blocks (K-quants) ----------------------------------------------------------------

// Q4_K and Q5_K pack 8 six-bit scales and 8 six-bit minimums into 12 bytes: sub-blocks 0..3 in the low six
// bits of bytes 0..3 (scales) and 4..7 (minimums); sub-blocks 4..7 in the nibbles of bytes 8..11, with their
// top two bits in the spare top bits of bytes 0..7.
ERNIE_HD void k_scale_min(const uint8_t* s, int j, float* sc, float* mn) {
  if (j < 4) {
    *sc = float(s[j] & 63);
    *mn = float(s[j + 4] & 63);
  } else {
    *sc = float((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
    *mn = float((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Q2_K: scales[16] (low nibble: scale, high: minimum, per 16 elements), qs[64] (2 bits each), d, dmin f16.
// Group g reads 2-bit plane (g % 4) of the 32 bytes of half g / 4.
struct Q2_K {
  static constexpr int block = 256, bytes = 84;
  ERNIE_HD static void group(const uint8_t* in, int g, float* out) {
    const uint8_t* q = in + 16 + (g / 4) * 32;
    const float d = half_at(in + 80), dmin = half_at(in + 82);
    const int shift = (g % 4) * 2;
    for (int part = 0; part < 2; ++part) {
      const uint8_t sc = in[2 * g + part];
      const float dl = d * float(sc & 15), ml = dmin * float(sc >> 4);
      for (int l = 0; l < 16; ++l) out[part * 16 + l] = dl * float((q[part * 16 + l] >> shift) & 3) - ml;
    }
  }
};

// Q3_K: hmask[32] (the third bit, plane g for group g), qs[64] (low 2 bits as Q2_K), scales[12] (16 six-bit
// scales, offset by 32), d f16. A quant is low - 4 where the high bit is clear.
struct Q3_K {
  static constexpr int block = 256, bytes = 110;
  // Scale j: its low nibble in bytes 0..7 (j < 8: low nibble of byte j, else the high nibble of byte j - 8);
  // its two high bits in bytes 8..11, (j % 4) selecting the byte and (j / 4) the bit pair.
  ERNIE_HD static int scale(const uint8_t* s, int j) {
    const int lo = j < 8 ? (s[j] & 15) : (s[j - 8] >> 4);
    const int hi = (s[8 + (j % 4)] >> (2 * (j / 4))) & 3;
    return int(int8_t((lo | (hi << 4)) - 32));
  }
  ERNIE_HD static void group(const uint8_t* in, int g, float* out) {
    const uint8_t* hm = in;
    const uint8_t* q = in + 32 + (g / 4) * 32;
    const float d = half_at(in + 108);
    const int shift = (g % 4) * 2;
    const uint8_t m = uint8_t(1u << g);
    for (int part = 0; part < 2; ++part) {
      const float dl = d * float(scale(in + 96, 2 * g + part));
      for (int l = 0; l < 16; ++l) {
        const int i = part * 16 + l;
        const int v = int((q[i] >> shift) & 3) - ((hm[i] & m) ? 0 : 4);
        out[i] = dl * float(v);
      }
    }
  }
};

// Q4_K: d, dmin f16, scales[12], qs[128]: 64 elements from each 32 bytes (low nibbles, then high).
struct Q4_K {
  static constexpr int block = 256, bytes = 144;
  ERNIE_HD static void group(const uint8_t* in, int g, float* out) {
    const float d = half_at(in), dmin = half_at(in + 2);
    const uint8_t* q = in + 16 + (g / 2) * 32;
    float sc, mn;
    k_scale_min(in + 4, g, &sc, &mn);
    const float d1 = d * sc, m1 = dmin * mn;
    for (int l = 0; l < 32; ++l) out[l] = d1 * float(g % 2 ? q[l] >> 4 : q[l] & 15) - m1;
  }
};

// Q5_K: d, dmin f16, scales[12], qh[32] (the fifth bit of group g is bit g), qs[128] as Q4_K.
struct Q5_K {
  static constexpr int block = 256, bytes = 176;
  ERNIE_HD static void group(const uint8_t* in, int g, float* out) {
    const float d = half_at(in), dmin = half_at(in + 2);
    const uint8_t* qh = in + 16;
    const uint8_t* q = in + 48 + (g / 2) * 32;
    float sc, mn;
    k_scale_min(in + 4, g, &sc, &mn);
    const float d1 = d * sc, m1 = dmin * mn;
    const uint8_t bit = uint8_t(1u << g);
    for (int l = 0; l < 32; ++l) out[l] = d1 * float((g % 2 ? q[l] >> 4 : q[l] & 15) + ((qh[l] & bit) ? 16 : 0)) - m1;
  }
};

// Q6_K: ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] int8 (per 16 elements), d f16; quants offset 32.
// Each half of 128 elements: group k (0..3) takes the low (k < 2) or high nibbles of ql[0..31] (k even) or
// ql[32..63] (k odd), and bit pair k of qh.
struct Q6_K {
  static constexpr int block = 256, bytes = 210;
  ERNIE_HD static void group(const uint8_t* in, int g, float* out) {
    const int half = g / 4, k = g % 4;
    const uint8_t* ql = in + half * 64 + (k % 2) * 32;
    const uint8_t* qh = in + 128 + half * 32;
    const int8_t* sc = reinterpret_cast<const int8_t*>(in + 192 + half * 8 + 2 * k);
    const float d = half_at(in + 208);
    for (int l = 0; l < 32; ++l) {
      const int low = k < 2 ? ql[l] & 15 : ql[l] >> 4;
      const int v = int(low | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
      out[l] = d * float(sc[l / 16]) * float(v);
    }
  }
};

// IQ4_XS: d f16, scales_h u16 (2 high bits per group), scales_l[4] (a nibble per group), qs[128]; group scale
// (six bits) - 32, nibbles index the codebook.
struct IQ4_XS {
  static constexpr int block = 256, bytes = 136;
  ERNIE_HD static void group(const uint8_t* in, int g, float* out) {
    const float d = half_at(in);
    const unsigned sh = unsigned(in[2] | (in[3] << 8));
    const uint8_t* q = in + 8 + g * 16;
    const int ls = int(((in[4 + g / 2] >> (4 * (g % 2))) & 15) | (((sh >> (2 * g)) & 3) << 4));
    const float dl = d * float(ls - 32);
    for (int j = 0; j < 16; ++j) {
      out[j] = dl * iq4_value(q[j] & 15);
      out[j + 16] = dl * iq4_value(q[j] >> 4);
    }
  }
};

// Calls f(T{}) with the type of GGML id `id` that has a decoder here; returns false for any other id.
template <class F>
bool with_type(int id, F&& f) {
  switch (id) {
    case 2: f(Q4_0{}); return true;
    case 3: f(Q4_1{}); return true;
    case 6: f(Q5_0{}); return true;
    case 7: f(Q5_1{}); return true;
    case 8: f(Q8_0{}); return true;
    case 10: f(Q2_K{}); return true;
    case 11: f(Q3_K{}); return true;
    case 12: f(Q4_K{}); return true;
    case 13: f(Q5_K{}); return true;
    case 14: f(Q6_K{}); return true;
    case 20: f(IQ4_NL{}); return true;
    case 23: f(IQ4_XS{}); return true;
    default: return false;
  }
}

}  // namespace ernie::ggml
