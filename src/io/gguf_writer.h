// Writing GGUF (version 3, little-endian, data aligned to 32 bytes) as llama.cpp's gguf library lays it out:
// the header, the metadata, the tensor infos (shapes stored innermost first, `ne`), then each tensor's data
// at an aligned offset. What `convert -o x.gguf` writes; io/gguf.h reads it back.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "core/tensor.h"

namespace ernie {

struct GgufOutTensor {
  std::string name;
  Shape shape;  // torch order (outermost first)
  int type = 0;  // GGML type id
  std::function<std::vector<uint8_t>()> bytes;  // the stored bytes, made when written
};
using GgufMetaValue = std::variant<std::string, uint32_t>;

// Stored bytes of a tensor of `shape` in GGML type `type` (an Error naming `name` when the innermost dimension
// is not a whole number of the type's blocks).
size_t ggml_nbytes(int type, const Shape& shape, const std::string& name);

// Writes `path` through core/atomic_file.h (refusing a target that is not a regular file or is one of
// `inputs`). Tensors are made and written in order, one at a time; `progress(done, total)` after each.
void write_gguf(const std::string& path, const std::vector<std::pair<std::string, GgufMetaValue>>& metadata,
                const std::vector<GgufOutTensor>& tensors, const std::function<void(size_t, size_t)>& progress = {},
                const std::vector<std::string>& inputs = {});

}  // namespace ernie
