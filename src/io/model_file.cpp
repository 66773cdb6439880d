#include "io/model_file.h"

#include "core/error.h"
#include "ops/ops.h"

namespace ernie {

WeightFormat parse_weight_format(const std::string& s) {
  if (s == "bf16") return WeightFormat::BF16;
  if (s == "fp8") return WeightFormat::FP8;
  if (s == "int8") return WeightFormat::INT8;
  fail("unknown weight format '", s, "' (expected bf16, fp8 or int8)");
}

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::FP8: return "fp8";
    case WeightFormat::INT8: return "int8";
    default: return "bf16";
  }
}

std::pair<Tensor, Tensor> quantize_rows(const Tensor& w, WeightFormat f) {
  ERNIE_CHECK(w.ndim() == 2, "quantize: weight ", shape_str(w.shape()), " is not 2-D");
  ERNIE_CHECK(f != WeightFormat::BF16, "quantize: bf16 is not a quantized format");
  ops::Weight q = ops::quantize(w.to(kCPU), f == WeightFormat::FP8 ? DType::F8_E4M3 : DType::I8);
  return {q.w, q.scale};
}

Tensor dequantize_rows(const Tensor& q, const Tensor& scale) { return ops::dequantize({q, scale}); }

}  // namespace ernie
