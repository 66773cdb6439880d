// The converted single-file model: one safetensors file holding every component's tensors (named
// "<component>/<original name>"), the component configs, tokenizers and chat template (as metadata
// entries "file:<relative path>"), with tensor data 64-byte aligned for direct upload. Linear weights may
// be quantized (fp8 e4m3 or int8, symmetric, one fp32 scale per output channel in "<name>_scale").
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "io/model_folder.h"

namespace ernie {

inline constexpr const char* kModelFileFormat = "ernie-image/1";

enum class WeightFormat { BF16, FP8, INT8 };
WeightFormat parse_weight_format(const std::string& s);  // "bf16", "fp8", "int8"
const char* weight_format_name(WeightFormat f);

// Which tensors are quantized (by convert, and by --quantize at load). A tensor is quantized when it is a
// 2-D linear weight of the DiT or the text encoder / prompt enhancer, its name matches none of `keep`, and
// it is not in the first or last DiT block (those, the time embedding, AdaLN modulation, text projection,
// patch embedding and final layer are known to break under naive 8-bit, see competitors.md
// "convert_to_quant #32").
struct QuantPolicy {
  std::vector<std::string> keep = {"time_embedding.", "adaLN_modulation.", "text_proj.", "x_embedder.",
                                   "final_norm.", "final_linear.", "embed_tokens.", "lm_head."};
  bool keep_first_last_dit_blocks = true;
  bool quantize_text_encoder = true;  // the text encoder's and the prompt enhancer's projections
  // Their 8-bit format is int8 whatever the DiT's: they run weight-only (expanded to bf16 as they run or at
  // load), so fp8's speed is of no use to them, and on random full-size weights an fp8 (3-bit mantissa) text
  // encoder strays ~4x further from bf16 than an int8 one (bench/BENCHMARKS.md, eighth session).
  bool text_models_int8 = true;
  // True when `component`/`name` (a weight name without the component prefix) is quantized.
  bool quantized(const std::string& component, const std::string& name, int dit_layers) const;
  // The 8-bit format of `component`'s quantized weights when the DiT's is `dit` (I8 or F8_E4M3).
  DType format(const std::string& component, DType dit) const;
  // The text encoder's 8-bit dtype under --quantize `dit` (none: not quantized).
  std::optional<DType> text_encoder_quantization(std::optional<DType> dit) const;
};

struct ConvertOptions {
  WeightFormat format = WeightFormat::BF16;
  QuantPolicy policy;
  bool include_pe = true;
  // Tensors converted and written at once, each by its own thread (0: OpenMP's thread count). Memory is
  // bounded by that many converted tensors.
  int threads = 0;
  // Static activation scales (fp8 only; pipeline/calibration.h): DiT weight name -> the largest |input| seen.
  // When set, every fp8 DiT weight gets "<name>_input_scale" = that / 448 (1 for 0), and one missing from
  // the map is an error.
  std::map<std::string, float> dit_input_amax;
};

struct ConvertStats {
  size_t tensors = 0, fp8 = 0, int8 = 0, bytes = 0;  // fp8 / int8: weights quantized to each
  double seconds = 0;
};

// Converts a model folder (or an already converted file) into one file at `out` (written atomically).
// `progress(done_bytes, total_bytes)` is called as tensors are written (from the writer threads, under a
// lock). The file's bytes do not depend on `opt.threads`.
ConvertStats convert_model(const ModelFolder& m, const std::string& out, const ConvertOptions& opt,
                           const std::function<void(size_t, size_t)>& progress = {});

// Quantizes a 2-D weight [out, in] to fp8 e4m3 or int8 with one scale per output row (host).
std::pair<Tensor, Tensor> quantize_rows(const Tensor& w, WeightFormat f);
// Inverse: q * scale -> F32 [out, in].
Tensor dequantize_rows(const Tensor& q, const Tensor& scale);

}  // namespace ernie
