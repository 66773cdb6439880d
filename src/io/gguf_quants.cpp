// The GGML block decoders. Each multiplies in the same order as ggml's reference de-quantizer (the scale
// times the quant, then minus the minimum), so results are bit-exact; the file is built with FP contraction
// off (CMakeLists) so no compiler turns a multiply-subtract into an FMA.
#include "io/gguf_quants.h"

#include <algorithm>
#include <cstring>

namespace ernie {

namespace {

float half(const uint8_t* p) { return f16_to_f32(uint16_t(p[0] | (p[1] << 8))); }
uint32_t u32le(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; }

// ---- 32-element blocks ------------------------------------------------------------------------------------
// Low nibbles hold elements 0..15, high nibbles 16..31.

void q4_0(const uint8_t* in, float* out, size_t n) {  // d f16, 16 bytes of nibbles; (q - 8) * d
  for (size_t b = 0; b < n; ++b, in += 18, out += 32) {
    const float d = half(in);
    const uint8_t* q = in + 2;
    for (int j = 0; j < 16; ++j) {
      out[j] = float(int(q[j] & 15) - 8) * d;
      out[j + 16] = float(int(q[j] >> 4) - 8) * d;
    }
  }
}

void q4_1(const uint8_t* in, float* out, size_t n) {  // d, m f16, nibbles; q * d + m
  for (size_t b = 0; b < n; ++b, in += 20, out += 32) {
    const float d = half(in), m = half(in + 2);
    const uint8_t* q = in + 4;
    for (int j = 0; j < 16; ++j) {
      out[j] = float(q[j] & 15) * d + m;
      out[j + 16] = float(q[j] >> 4) * d + m;
    }
  }
}

// The fifth bit of element j (0..31) is bit j of the 32-bit little-endian `high`.
void q5_0(const uint8_t* in, float* out, size_t n) {  // d f16, high bits u32, nibbles; (q - 16) * d
  for (size_t b = 0; b < n; ++b, in += 22, out += 32) {
    const float d = half(in);
    const uint32_t high = u32le(in + 2);
    const uint8_t* q = in + 6;
    for (int j = 0; j < 16; ++j) {
      const int lo = int((q[j] & 15) | (((high >> j) & 1) << 4));
      const int hi = int((q[j] >> 4) | (((high >> (j + 16)) & 1) << 4));
      out[j] = float(lo - 16) * d;
      out[j + 16] = float(hi - 16) * d;
    }
  }
}

void q5_1(const uint8_t* in, float* out, size_t n) {  // d, m f16, high bits u32, nibbles; q * d + m
  for (size_t b = 0; b < n; ++b, in += 24, out += 32) {
    const float d = half(in), m = half(in + 2);
    const uint32_t high = u32le(in + 4);
    const uint8_t* q = in + 8;
    for (int j = 0; j < 16; ++j) {
      const unsigned lo = (q[j] & 15u) | (((high >> j) & 1u) << 4);
      const unsigned hi = (q[j] >> 4) | (((high >> (j + 16)) & 1u) << 4);
      out[j] = float(lo) * d + m;
      out[j + 16] = float(hi) * d + m;
    }
  }
}

void q8_0(const uint8_t* in, float* out, size_t n) {  // d f16, 32 int8; q * d
  for (size_t b = 0; b < n; ++b, in += 34, out += 32) {
    const float d = half(in);
    for (int j = 0; j < 32; ++j) out[j] = float(int8_t(in[2 + j])) * d;
  }
}

// The non-linear 4-bit codebook of IQ4_NL and IQ4_XS.
constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

void iq4_nl(const uint8_t* in, float* out, size_t n) {  // d f16, nibbles indexing the codebook
  for (size_t b = 0; b < n; ++b, in += 18, out += 32) {
    const float d = half(in);
    const uint8_t* q = in + 2;
    for (int j = 0; j < 16; ++j) {
      out[j] = d * float(kIq4Values[q[j] & 15]);
      out[j + 16] = d * float(kIq4Values[q[j] >> 4]);
    }
  }
}

// ---- 256-element super-blocks (K-quants) -----------------------------------------------------------------

// Q4_K and Q5_K pack 8 six-bit scales and 8 six-bit minimums into 12 bytes: sub-blocks 0..3 in the low six
// bits of bytes 0..3 (scales) and 4..7 (minimums); sub-blocks 4..7 in the nibbles of bytes 8..11, with their
// top two bits in the spare top bits of bytes 0..7.
void k_scale_min(const uint8_t* s, int j, float* sc, float* mn) {
  if (j < 4) {
    *sc = float(s[j] & 63);
    *mn = float(s[j + 4] & 63);
  } else {
    *sc = float((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
    *mn = float((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

void q2_k(const uint8_t* in, float* out, size_t n) {
  // scales[16] (low nibble: scale, high: minimum, per 16 elements), qs[64] (2 bits each), d, dmin f16.
  for (size_t b = 0; b < n; ++b, in += 84) {
    const uint8_t* scales = in;
    const uint8_t* q = in + 16;
    const float d = half(in + 80), dmin = half(in + 82);
    int is = 0;
    for (int half_ = 0; half_ < 2; ++half_, q += 32)    // 128 elements from 32 bytes each
      for (int shift = 0; shift < 8; shift += 2)        // four 2-bit planes
        for (int part = 0; part < 2; ++part, ++is) {    // bytes 0..15, then 16..31
          const float dl = d * float(scales[is] & 15), ml = dmin * float(scales[is] >> 4);
          for (int l = 0; l < 16; ++l) *out++ = dl * float((q[part * 16 + l] >> shift) & 3) - ml;
        }
  }
}

void q3_k(const uint8_t* in, float* out, size_t n) {
  // hmask[32] (the third bit, one plane per 32-element group), qs[64] (low 2 bits), scales[12] (16 six-bit
  // scales, offset by 32), d f16. A quant is (low | high << 2) - 4, i.e. low - 4 where the high bit is clear.
  for (size_t b = 0; b < n; ++b, in += 110) {
    const uint8_t* hm = in;
    const uint8_t* q = in + 32;
    const uint8_t* s = in + 96;
    const float d = half(in + 108);
    int8_t sc[16];
    for (int j = 0; j < 16; ++j) {
      // Low nibble: bytes 0..7 (j < 8: low nibble of byte j; else high nibble of byte j - 8); the two
      // high bits: bytes 8..11, two bits per scale, (j % 4) selects the byte, (j / 4) the bit pair.
      const int lo = j < 8 ? (s[j] & 15) : (s[j - 8] >> 4);
      const int hi = (s[8 + (j % 4)] >> (2 * (j / 4))) & 3;
      sc[j] = int8_t((lo | (hi << 4)) - 32);
    }
    int is = 0;
    uint8_t m = 1;
    for (int half_ = 0; half_ < 2; ++half_, q += 32)
      for (int shift = 0; shift < 8; shift += 2, m = uint8_t(m << 1))
        for (int part = 0; part < 2; ++part, ++is) {
          const float dl = d * float(sc[is]);
          for (int l = 0; l < 16; ++l) {
            const int i = part * 16 + l;
            const int v = int((q[i] >> shift) & 3) - ((hm[i] & m) ? 0 : 4);
            *out++ = dl * float(v);
          }
        }
  }
}

void q4_k(const uint8_t* in, float* out, size_t n) {
  // d, dmin f16, scales[12], qs[128]: 64 elements from each 32 bytes (low nibbles, then high).
  for (size_t b = 0; b < n; ++b, in += 144) {
    const float d = half(in), dmin = half(in + 2);
    const uint8_t* s = in + 4;
    const uint8_t* q = in + 16;
    for (int j = 0; j < 8; j += 2, q += 32) {
      float sc, mn;
      k_scale_min(s, j, &sc, &mn);
      const float d1 = d * sc, m1 = dmin * mn;
      k_scale_min(s, j + 1, &sc, &mn);
      const float d2 = d * sc, m2 = dmin * mn;
      for (int l = 0; l < 32; ++l) *out++ = d1 * float(q[l] & 15) - m1;
      for (int l = 0; l < 32; ++l) *out++ = d2 * float(q[l] >> 4) - m2;
    }
  }
}

void q5_k(const uint8_t* in, float* out, size_t n) {
  // d, dmin f16, scales[12], qh[32] (the fifth bits: two planes per 64 elements), qs[128].
  for (size_t b = 0; b < n; ++b, in += 176) {
    const float d = half(in), dmin = half(in + 2);
    const uint8_t* s = in + 4;
    const uint8_t* qh = in + 16;
    const uint8_t* q = in + 48;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < 8; j += 2, q += 32, u1 = uint8_t(u1 << 2), u2 = uint8_t(u2 << 2)) {
      float sc, mn;
      k_scale_min(s, j, &sc, &mn);
      const float d1 = d * sc, m1 = dmin * mn;
      k_scale_min(s, j + 1, &sc, &mn);
      const float d2 = d * sc, m2 = dmin * mn;
      for (int l = 0; l < 32; ++l) *out++ = d1 * float((q[l] & 15) + ((qh[l] & u1) ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *out++ = d2 * float((q[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    }
  }
}

void q6_k(const uint8_t* in, float* out, size_t n) {
  // ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] int8 (per 16 elements), d f16; quants offset 32.
  for (size_t b = 0; b < n; ++b, in += 210) {
    const uint8_t* ql = in;
    const uint8_t* qh = in + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(in + 192);
    const float d = half(in + 208);
    for (int half_ = 0; half_ < 2; ++half_, ql += 64, qh += 32, sc += 8, out += 128)
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int v0 = int((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int v1 = int((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int v2 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int v3 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        out[l] = d * float(sc[is]) * float(v0);
        out[l + 32] = d * float(sc[is + 2]) * float(v1);
        out[l + 64] = d * float(sc[is + 4]) * float(v2);
        out[l + 96] = d * float(sc[is + 6]) * float(v3);
      }
  }
}

void iq4_xs(const uint8_t* in, float* out, size_t n) {
  // d f16, scales_h u16 (2 high bits per 32-element group), scales_l[4] (a nibble per group), qs[128];
  // group scale (six bits) - 32, nibbles index the codebook.
  for (size_t b = 0; b < n; ++b, in += 136) {
    const float d = half(in);
    const unsigned sh = unsigned(in[2] | (in[3] << 8));
    const uint8_t* sl = in + 4;
    const uint8_t* q = in + 8;
    for (int g = 0; g < 8; ++g, q += 16, out += 32) {
      const int ls = int(((sl[g / 2] >> (4 * (g % 2))) & 15) | (((sh >> (2 * g)) & 3) << 4));
      const float dl = d * float(ls - 32);
      for (int j = 0; j < 16; ++j) {
        out[j] = dl * float(kIq4Values[q[j] & 15]);
        out[j + 16] = dl * float(kIq4Values[q[j] >> 4]);
      }
    }
  }
}

using Decode = void (*)(const uint8_t*, float*, size_t);
struct Row {
  const char* name;
  int64_t block;
  size_t bytes;
  std::optional<DType> plain;
  Decode decode;
};
constexpr std::optional<DType> kNone = std::nullopt;

// Indexed by id; a null name marks an id GGML never assigned or has since removed.
const Row kTypes[] = {
    /* 0*/ {"F32", 1, 4, DType::F32, nullptr},
    /* 1*/ {"F16", 1, 2, DType::F16, nullptr},
    /* 2*/ {"Q4_0", 32, 18, kNone, q4_0},
    /* 3*/ {"Q4_1", 32, 20, kNone, q4_1},
    /* 4*/ {nullptr, 0, 0, kNone, nullptr},
    /* 5*/ {nullptr, 0, 0, kNone, nullptr},
    /* 6*/ {"Q5_0", 32, 22, kNone, q5_0},
    /* 7*/ {"Q5_1", 32, 24, kNone, q5_1},
    /* 8*/ {"Q8_0", 32, 34, kNone, q8_0},
    /* 9*/ {"Q8_1", 32, 36, kNone, nullptr},
    /*10*/ {"Q2_K", 256, 84, kNone, q2_k},
    /*11*/ {"Q3_K", 256, 110, kNone, q3_k},
    /*12*/ {"Q4_K", 256, 144, kNone, q4_k},
    /*13*/ {"Q5_K", 256, 176, kNone, q5_k},
    /*14*/ {"Q6_K", 256, 210, kNone, q6_k},
    /*15*/ {"Q8_K", 256, 292, kNone, nullptr},
    /*16*/ {"IQ2_XXS", 256, 66, kNone, nullptr},
    /*17*/ {"IQ2_XS", 256, 74, kNone, nullptr},
    /*18*/ {"IQ3_XXS", 256, 98, kNone, nullptr},
    /*19*/ {"IQ1_S", 256, 50, kNone, nullptr},
    /*20*/ {"IQ4_NL", 32, 18, kNone, iq4_nl},
    /*21*/ {"IQ3_S", 256, 110, kNone, nullptr},
    /*22*/ {"IQ2_S", 256, 82, kNone, nullptr},
    /*23*/ {"IQ4_XS", 256, 136, kNone, iq4_xs},
    /*24*/ {"I8", 1, 1, DType::I8, nullptr},
    /*25*/ {"I16", 1, 2, kNone, nullptr},
    /*26*/ {"I32", 1, 4, DType::I32, nullptr},
    /*27*/ {"I64", 1, 8, DType::I64, nullptr},
    /*28*/ {"F64", 1, 8, kNone, nullptr},
    /*29*/ {"IQ1_M", 256, 56, kNone, nullptr},
    /*30*/ {"BF16", 1, 2, DType::BF16, nullptr},
    /*31*/ {nullptr, 0, 0, kNone, nullptr},
    /*32*/ {nullptr, 0, 0, kNone, nullptr},
    /*33*/ {nullptr, 0, 0, kNone, nullptr},
    /*34*/ {"TQ1_0", 256, 54, kNone, nullptr},
    /*35*/ {"TQ2_0", 256, 66, kNone, nullptr},
    /*36*/ {nullptr, 0, 0, kNone, nullptr},
    /*37*/ {nullptr, 0, 0, kNone, nullptr},
    /*38*/ {nullptr, 0, 0, kNone, nullptr},
    /*39*/ {"MXFP4", 32, 17, kNone, nullptr},
};
constexpr uint32_t kNumTypes = uint32_t(sizeof(kTypes) / sizeof(kTypes[0]));

const GgmlType* build_table() {
  static GgmlType t[kNumTypes];
  for (uint32_t i = 0; i < kNumTypes; ++i)
    t[i] = {int(i), kTypes[i].name, kTypes[i].block, kTypes[i].bytes, kTypes[i].plain, kTypes[i].decode};
  return t;
}

}  // namespace

const GgmlType* ggml_type(uint32_t id) {
  static const GgmlType* table = build_table();
  if (id >= kNumTypes || !kTypes[id].name) return nullptr;
  return &table[id];
}

void ggml_decode(const GgmlType& t, const uint8_t* in, float* out, int64_t numel) {
  const int64_t nblocks = numel / t.block;
  constexpr int64_t kChunk = 256;  // blocks per task
  const int64_t tasks = (nblocks + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (tasks > 1)
  for (int64_t c = 0; c < tasks; ++c) {
    const int64_t b0 = c * kChunk, nb = std::min(kChunk, nblocks - b0);
    t.decode(in + size_t(b0) * t.block_bytes, out + b0 * t.block, size_t(nb));
  }
}

}  // namespace ernie
