#include "engine/options.h"

#include <cctype>
#include <cstdio>

#include "core/error.h"
#include "ops/ops.h"

namespace ernie {

const char* offload_name(Offload o) {
  switch (o) {
    case Offload::None: return "none";
    case Offload::TextEncoder: return "text-encoder";
    case Offload::Blocks: return "blocks";
  }
  return "?";
}

Offload parse_offload(const std::string& s) {
  for (Offload o : {Offload::None, Offload::TextEncoder, Offload::Blocks})
    if (s == offload_name(o)) return o;
  fail("--offload: unknown mode '", s, "' (use none, text-encoder or blocks)");
}

Device parse_device_option(const std::string& s) {
  if (s == "auto" || s.empty()) {  // cuda:0 where the backend can run on it, else the CPU (saying why)
    if (ops::cuda_device_count() == 0) return kCPU;
    const Device gpu = Device::parse("cuda");
    const std::string why = ops::unusable_reason(gpu);
    if (why.empty()) return gpu;
    std::fprintf(stderr, "note: %s; --device auto runs on the CPU\n", why.c_str());
    return kCPU;
  }
  return Device::parse(s);
}

DType parse_dtype_option(const std::string& name, Device device) {
  if (name.empty()) return device.is_cpu() ? DType::F32 : DType::BF16;
  std::string s = name;  // F32 and BF16 too, as dtype_name writes them
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (s == "f32" || s == "fp32" || s == "float32") return DType::F32;
  if (s == "bf16" || s == "bfloat16") return DType::BF16;
  fail("--dtype: unknown type '", name, "' (use f32 or bf16)");
}

std::optional<DType> parse_quantize_option(const std::string& s) {
  if (s.empty() || s == "none") return std::nullopt;
  if (s == "fp8") return DType::F8_E4M3;
  if (s == "int8") return DType::I8;
  fail("--quantize: unknown format '", s, "' (use fp8, int8 or none)");
}

bool parse_lora_apply_option(const std::string& s) {
  if (s.empty() || s == "auto" || s == "immediately") return false;
  if (s == "at_runtime") return true;
  fail("--lora-apply-mode: unknown mode '", s, "' (use auto, immediately or at_runtime)");
}

bool parse_attention_option(const std::string& s) {
  if (s.empty() || s == "bf16") return false;
  if (s == "fp8") return true;
  fail("--attention: unknown precision '", s, "' (use bf16 or fp8)");
}

}  // namespace ernie
