// Helpers shared by `generate` and `encode`: option parsing, output paths, latents files.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/memory_plan.h"
#include "io/model_folder.h"
#include "pipeline/pipeline.h"

namespace ernie::cli {

// "" picks the device's default (f32 on the CPU, bf16 on CUDA); else "f32"/"fp32" or "bf16".
DType parse_dtype_option(const std::string& s, Device device);
// --quantize: "fp8" -> F8_E4M3, "int8" -> I8, "" or "none" -> nothing.
std::optional<DType> parse_quantize_option(const std::string& s);

// `pattern` with %d (or %0Nd, and %% for a literal %) replaced by 0..n-1. Without a %d and n > 1, "_%d" is
// inserted before the extension. Throws on malformed patterns and on duplicate names.
std::vector<std::string> expand_output_paths(const std::string& pattern, int n);

// Throws unless `path` ends with `ext`, is not a folder, and its folder exists and is writable.
void check_writable(const std::string& path, const std::string& ext);

// --offload / --max-vram for a resolved request: the offload mode to load with. With `max_vram_gib` > 0
// the least offloading (and VAE tiling, unless it is Off) whose estimated peak fits (io/memory_plan.h),
// else `offload` as given. Throws on a CPU device with --max-vram or --offload blocks, and when nothing fits.
struct OffloadChoice {
  Offload mode = Offload::TextEncoder;
  bool vae_tiling = false;  // the plan counts on a tiled decode (automatic under the allocator cap)
  size_t limit_bytes = 0;   // --max-vram in bytes (0: none)
  size_t estimate_bytes = 0;
};
OffloadChoice choose_offload(const ModelFolder& m, const GenerateRequest& r, Device device, DType act,
                             const std::string& offload, double max_vram_gib, bool use_pe, int prompt_tokens,
                             VaeTilingMode vae_tiling);
// Sets the pipeline options that carry an offload choice.
void apply_offload(const OffloadChoice& c, PipelineOptions& popt);

struct InitLatents {
  Tensor latents;               // F32 on the host (owned copy)
  std::optional<uint64_t> seed; // from the file's metadata, when it was saved by --save-latents
};
InitLatents load_init_latents(const std::string& path);

}  // namespace ernie::cli
