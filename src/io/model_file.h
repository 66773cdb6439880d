// The converted single-file model's format: one safetensors file holding every component's tensors (named
// "<component>/<original name>"), the component configs, tokenizers and chat template (as metadata
// entries "file:<relative path>"), laid out as io/safetensors.h's writer does: spans contiguous (the
// reference library's rule), every tensor whose size is a multiple of 64 bytes 64-byte aligned for direct
// upload (all large weights), the few others aligned to their element size. Linear weights may
// be quantized (fp8 e4m3 or int8, symmetric, one fp32 scale per output channel in "<name>_scale").
// Writing one is convert/convert.h; which weights are 8-bit, models/quant_policy.h.
#pragma once
#include <string>
#include <utility>

#include "core/tensor.h"

namespace ernie {

inline constexpr const char* kModelFileFormat = "ernie-image/1";

enum class WeightFormat { BF16, FP8, INT8 };
WeightFormat parse_weight_format(const std::string& s);  // "bf16", "fp8", "int8"
const char* weight_format_name(WeightFormat f);

// Quantizes a 2-D weight [out, in] to fp8 e4m3 or int8 with one scale per output row (host).
std::pair<Tensor, Tensor> quantize_rows(const Tensor& w, WeightFormat f);
// Inverse: q * scale -> F32 [out, in].
Tensor dequantize_rows(const Tensor& q, const Tensor& scale);

}  // namespace ernie
