// `convert`: a model folder (or a converted file) into the single-file format of io/model_file.h, with
// bf16 or 8-bit linear weights as models/quant_policy.h picks them.
#pragma once
#include <functional>
#include <map>
#include <string>

#include "io/model_file.h"
#include "io/model_folder.h"
#include "models/quant_policy.h"

namespace ernie {

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
  size_t ggml = 0;  // GGUF output: weights block-quantized
  double seconds = 0;
};

// Throws Error when writing `out` could lose data: `out` resolves (through symlinks, hard links) to a file the
// model is read from (a checkpoint shard, an index, a config, a tokenizer file; a converted input file
// itself), it exists and is not a regular file (a device, a folder, a FIFO), or it is a new .safetensors in
// one of the model's checkpoint folders (which would then hold two checkpoints). convert_model runs it first;
// a front end may run it before anything long (calibration). The GGUF writer refuses those inputs again as it starts.
void check_convert_output(const ModelFolder& m, const std::string& out);
// Every file the model is read from: checkpoints, index, configs, tokenizer files (a converted file itself).
std::vector<std::string> convert_inputs(const ModelFolder& m);

// Converts a model folder (or an already converted file) into one file at `out` (written atomically).
// `progress(done_bytes, total_bytes)` is called as tensors are written (from the writer threads, under a
// lock). The file's bytes do not depend on `opt.threads`.
ConvertStats convert_model(const ModelFolder& m, const std::string& out, const ConvertOptions& opt,
                           const std::function<void(size_t, size_t)>& progress = {});

// `convert -o x.gguf`: the DiT alone as a GGUF laid out as llama.cpp's gguf library writes it (v3, 32-byte
// alignment, general.file_type), the diffusers tensor names bare, x_embedder.proj.weight 4-D.
// general.architecture is `arch`: kDefaultDitGgufArch ("wan") by default, the value unsloth's ERNIE-Image GGUFs
// carry and one that ComfyUI-GGUF's loader accepts (its IMG_ARCH_LIST has no ERNIE entry;
// tests/test_gguf_write.cpp checks the value against that list). The block linears that `policy` quantizes take
// `ggml_type` (io/gguf_encode.h: Q8_0, Q4_K, Q5_K, Q6_K; or BF16, F16, F32 for every weight); the other 2-D
// weights BF16 (F32 when ggml_type is F32), 1-D and 4-D tensors F32.
inline constexpr const char* kDefaultDitGgufArch = "wan";
ConvertStats convert_dit_gguf(const ModelFolder& m, const std::string& out, int ggml_type, const QuantPolicy& policy,
                              const std::string& arch = kDefaultDitGgufArch,
                              const std::function<void(size_t, size_t)>& progress = {});

// `convert --model x.gguf -o y.safetensors --dtype f32|bf16|f16`: every tensor of any GGUF (block types
// de-quantized, shapes in torch order, names as stored) into a safetensors file, float tensors in `dtype`.
ConvertStats convert_gguf_tensors(const std::string& in, const std::string& out, DType dtype,
                                  const std::function<void(size_t, size_t)>& progress = {});

}  // namespace ernie
