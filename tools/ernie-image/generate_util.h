// Helpers shared by `generate` and `encode`: output paths, latents files.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "engine/image.h"

namespace ernie::cli {

// `pattern` with %d (or %0Nd, and %% for a literal %) replaced by 0..n-1. Without a %d and n > 1, "_%d" is
// inserted before the extension. Throws on malformed patterns and on duplicate names.
std::vector<std::string> expand_output_paths(const std::string& pattern, int n);

// Throws unless `path` ends with one of `exts` (any case), is not a folder, and its folder exists and is writable;
// and, as the writer would at the end (core/atomic_file.h), unless it is a new or regular file other than each of
// `inputs`.
void check_writable(const std::string& path, const std::vector<std::string>& exts,
                    const std::vector<std::string>& inputs = {});

struct InitLatents {
  Tensor latents;               // F32 on the host (owned copy)
  std::optional<uint64_t> seed; // from the file's metadata, when it was saved by --save-latents
};
InitLatents load_init_latents(const std::string& path);

// An image for img2img or a mask, from a PNG file (alpha kept for masks); throws Error naming `flag` and the path.
Image load_image_flag(const std::string& path, const char* flag);

}  // namespace ernie::cli
