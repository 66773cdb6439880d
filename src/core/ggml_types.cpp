// The GGML type table and the host de-quantizer. The block decoders (core/ggml_blocks.h) multiply in the
// same order as ggml's reference de-quantizer (the scale times the quant, then minus the minimum), so results
// are bit-exact; the file is built with FP contraction off (CMakeLists) so no compiler turns a
// multiply-subtract into an FMA.
#include "core/ggml_types.h"

#include <algorithm>
#include <cstring>

#include "core/ggml_blocks.h"

namespace ernie {

namespace {

// Every block of a tensor through its type's group decoder (core/ggml_blocks.h, shared with the GPU).
template <class T>
void decode(const uint8_t* in, float* out, size_t n) {
  for (size_t b = 0; b < n; ++b, in += T::bytes)
    for (int g = 0; g < T::block / 32; ++g, out += 32) T::group(in, g, out);
}

struct Row {
  const char* name;
  int64_t block;
  size_t bytes;
  std::optional<DType> plain;
};
constexpr std::optional<DType> kNone = std::nullopt;

// Indexed by id; a null name marks an id GGML never assigned or has since removed. The decoders come from
// core/ggml_blocks.h (ggml::with_type), which also knows each decodable type's geometry.
const Row kTypes[] = {
    /* 0*/ {"F32", 1, 4, DType::F32},
    /* 1*/ {"F16", 1, 2, DType::F16},
    /* 2*/ {"Q4_0", 32, 18, kNone},
    /* 3*/ {"Q4_1", 32, 20, kNone},
    /* 4*/ {nullptr, 0, 0, kNone},
    /* 5*/ {nullptr, 0, 0, kNone},
    /* 6*/ {"Q5_0", 32, 22, kNone},
    /* 7*/ {"Q5_1", 32, 24, kNone},
    /* 8*/ {"Q8_0", 32, 34, kNone},
    /* 9*/ {"Q8_1", 32, 36, kNone},
    /*10*/ {"Q2_K", 256, 84, kNone},
    /*11*/ {"Q3_K", 256, 110, kNone},
    /*12*/ {"Q4_K", 256, 144, kNone},
    /*13*/ {"Q5_K", 256, 176, kNone},
    /*14*/ {"Q6_K", 256, 210, kNone},
    /*15*/ {"Q8_K", 256, 292, kNone},
    /*16*/ {"IQ2_XXS", 256, 66, kNone},
    /*17*/ {"IQ2_XS", 256, 74, kNone},
    /*18*/ {"IQ3_XXS", 256, 98, kNone},
    /*19*/ {"IQ1_S", 256, 50, kNone},
    /*20*/ {"IQ4_NL", 32, 18, kNone},
    /*21*/ {"IQ3_S", 256, 110, kNone},
    /*22*/ {"IQ2_S", 256, 82, kNone},
    /*23*/ {"IQ4_XS", 256, 136, kNone},
    /*24*/ {"I8", 1, 1, DType::I8},
    /*25*/ {"I16", 1, 2, kNone},
    /*26*/ {"I32", 1, 4, DType::I32},
    /*27*/ {"I64", 1, 8, DType::I64},
    /*28*/ {"F64", 1, 8, kNone},
    /*29*/ {"IQ1_M", 256, 56, kNone},
    /*30*/ {"BF16", 1, 2, DType::BF16},
    /*31*/ {nullptr, 0, 0, kNone},
    /*32*/ {nullptr, 0, 0, kNone},
    /*33*/ {nullptr, 0, 0, kNone},
    /*34*/ {"TQ1_0", 256, 54, kNone},
    /*35*/ {"TQ2_0", 256, 66, kNone},
    /*36*/ {nullptr, 0, 0, kNone},
    /*37*/ {nullptr, 0, 0, kNone},
    /*38*/ {nullptr, 0, 0, kNone},
    /*39*/ {"MXFP4", 32, 17, kNone},
};
constexpr uint32_t kNumTypes = uint32_t(sizeof(kTypes) / sizeof(kTypes[0]));

const GgmlType* build_table() {
  static GgmlType t[kNumTypes];
  for (uint32_t i = 0; i < kNumTypes; ++i) {
    t[i] = {int(i), kTypes[i].name, kTypes[i].block, kTypes[i].bytes, kTypes[i].plain, nullptr};
    ggml::with_type(int(i), [&](auto q) {
      using Q = decltype(q);
      if (Q::block == t[i].block && size_t(Q::bytes) == t[i].block_bytes) t[i].decode = decode<Q>;
    });
  }
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
