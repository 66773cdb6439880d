// A file of named tensors, whatever its format (safetensors, GGUF): what a Checkpoint is built from.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ernie {

struct TensorInfo {
  std::string name;
  DType dtype;  // what tensor() returns: the stored dtype, or F32 for a GGML block-quantized tensor
  Shape shape;  // torch order (outermost first), whatever order the file stores
  size_t begin = 0, end = 0;  // byte span of the stored data inside the file's data section
  std::string file;           // which file holds it
  int ggml_type = -1;         // GGUF: the GGML type id as stored (core/ggml_types.h); -1 elsewhere
};

class TensorFile {
 public:
  virtual ~TensorFile() = default;
  virtual const char* format() const = 0;  // "safetensors", "gguf"
  virtual const std::string& path() const = 0;
  virtual size_t file_size() const = 0;
  virtual const std::vector<TensorInfo>& tensors() const = 0;
  virtual const TensorInfo* find(const std::string& name) const = 0;
  // A tensor stored as a plain dtype is a zero-copy view into the mapping (a copy where the data is not aligned
  // to its elements); a block-quantized one comes back de-quantized to F32 on the host. Throws naming the
  // tensor when absent.
  virtual Tensor tensor(const std::string& name) const = 0;
  // The stored bytes of a GGML block-quantized 2-D tensor as a zero-copy U8 [rows, row bytes] view, for a
  // device that de-quantizes as it runs (ops::Weight::ggml_blocks); undefined for any other tensor.
  virtual Tensor stored_blocks(const std::string&) const { return Tensor(); }
};

// Opens a tensor file by its content (the GGUF magic, else safetensors), never by its name.
std::shared_ptr<TensorFile> open_tensor_file(const std::string& path);

}  // namespace ernie
