// The GGML type table and the host de-quantizer. The block decoders (core/ggml_blocks.h) multiply in the
// same order as ggml's reference de-quantizer (the scale times the quant, then minus the minimum), so results
// are bit-exact; the file is built with FP contraction off (CMakeLists) so no compiler turns a
// multiply-subtract into an FMA.
#include "io/gguf_quants.h"

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
    /* 2*/ {"Q4_0", ggml::Q4_0::block, ggml::Q4_0::bytes, kNone, decode<ggml::Q4_0>},
    /* 3*/ {"Q4_1", ggml::Q4_1::block, ggml::Q4_1::bytes, kNone, decode<ggml::Q4_1>},
    /* 4*/ {nullptr, 0, 0, kNone, nullptr},
    /* 5*/ {nullptr, 0, 0, kNone, nullptr},
    /* 6*/ {"Q5_0", ggml::Q5_0::block, ggml::Q5_0::bytes, kNone, decode<ggml::Q5_0>},
    /* 7*/ {"Q5_1", ggml::Q5_1::block, ggml::Q5_1::bytes, kNone, decode<ggml::Q5_1>},
    /* 8*/ {"Q8_0", ggml::Q8_0::block, ggml::Q8_0::bytes, kNone, decode<ggml::Q8_0>},
    /* 9*/ {"Q8_1", 32, 36, kNone, nullptr},
    /*10*/ {"Q2_K", ggml::Q2_K::block, ggml::Q2_K::bytes, kNone, decode<ggml::Q2_K>},
    /*11*/ {"Q3_K", ggml::Q3_K::block, ggml::Q3_K::bytes, kNone, decode<ggml::Q3_K>},
    /*12*/ {"Q4_K", ggml::Q4_K::block, ggml::Q4_K::bytes, kNone, decode<ggml::Q4_K>},
    /*13*/ {"Q5_K", ggml::Q5_K::block, ggml::Q5_K::bytes, kNone, decode<ggml::Q5_K>},
    /*14*/ {"Q6_K", ggml::Q6_K::block, ggml::Q6_K::bytes, kNone, decode<ggml::Q6_K>},
    /*15*/ {"Q8_K", 256, 292, kNone, nullptr},
    /*16*/ {"IQ2_XXS", 256, 66, kNone, nullptr},
    /*17*/ {"IQ2_XS", 256, 74, kNone, nullptr},
    /*18*/ {"IQ3_XXS", 256, 98, kNone, nullptr},
    /*19*/ {"IQ1_S", 256, 50, kNone, nullptr},
    /*20*/ {"IQ4_NL", ggml::IQ4_NL::block, ggml::IQ4_NL::bytes, kNone, decode<ggml::IQ4_NL>},
    /*21*/ {"IQ3_S", 256, 110, kNone, nullptr},
    /*22*/ {"IQ2_S", 256, 82, kNone, nullptr},
    /*23*/ {"IQ4_XS", ggml::IQ4_XS::block, ggml::IQ4_XS::bytes, kNone, decode<ggml::IQ4_XS>},
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
