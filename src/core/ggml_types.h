// GGML tensor types as GGUF files store them: the table of ids, names and block geometry, and the CPU
// decoders of the block-quantized ones to f32 (layouts as ggml defines them: ggml-common.h, ggml-quants.c).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>

#include "core/dtype.h"

namespace ernie {

// One GGML type: `block` elements take `block_bytes` bytes. `plain` is set for the types stored as an
// element type of ours (F32, F16, BF16, I8, I32, I64: read zero-copy); `decode` for the block types this
// build de-quantizes. A known type with neither (IQ2_XXS, Q8_K, ...) is named in errors but not read.
struct GgmlType {
  int id = -1;
  const char* name = nullptr;
  int64_t block = 0;
  size_t block_bytes = 0;
  std::optional<DType> plain;
  // Decodes `nblocks` consecutive blocks at `in` into nblocks * block floats at `out`.
  void (*decode)(const uint8_t* in, float* out, size_t nblocks) = nullptr;
};

// The type with this id, or nullptr for an id GGML never defined (or removed: 4, 5, 31-33, 36-38).
const GgmlType* ggml_type(uint32_t id);

// Decodes a whole tensor of `numel` elements (a multiple of the type's block) stored at `in`, in parallel.
void ggml_decode(const GgmlType& t, const uint8_t* in, float* out, int64_t numel);

}  // namespace ernie
