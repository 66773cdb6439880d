// GGML block-quantized weights to F32 on the host: the reference the GPU's de-quantizer
// (ops/cuda/ggml_dequantize.cu) is tested against. The decoding is core/ggml_types' (core/ggml_blocks.h).
#include "core/error.h"
#include "core/ggml_types.h"
#include "ops/cpu/cpu_ops.h"

namespace ernie::cpu {

Tensor dequantize_blocks(const Tensor& raw, int ggml_type, int64_t cols, DType out) {
  if (out != DType::F32) return cast(dequantize_blocks(raw, ggml_type, cols, DType::F32), out);
  const GgmlType* t = ggml_type >= 0 ? ernie::ggml_type(uint32_t(ggml_type)) : nullptr;
  ERNIE_CHECK(t && t->decode, "dequantize: GGML type ", std::to_string(ggml_type), " has no decoder");
  Tensor y = Tensor::empty({raw.dim(0), cols}, DType::F32);
  ggml_decode(*t, static_cast<const uint8_t*>(raw.raw()), y.f32(), y.numel());
  return y;
}

}  // namespace ernie::cpu
