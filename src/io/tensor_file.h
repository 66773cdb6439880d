// A file of named tensors, whatever its format (safetensors now; GGUF to come): what a Checkpoint is built from.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ernie {

struct TensorInfo {
  std::string name;
  DType dtype;
  Shape shape;  // torch order (outermost first), whatever order the file stores
  size_t begin = 0, end = 0;  // byte span of the stored data inside the file's data section
  std::string file;           // which file holds it
};

class TensorFile {
 public:
  virtual ~TensorFile() = default;
  virtual const char* format() const = 0;  // "safetensors"
  virtual const std::string& path() const = 0;
  virtual size_t file_size() const = 0;
  virtual const std::vector<TensorInfo>& tensors() const = 0;
  virtual const TensorInfo* find(const std::string& name) const = 0;
  // A zero-copy view into the file's mapping (a copy where the data is not aligned to its elements). Throws
  // naming the tensor when absent.
  virtual Tensor tensor(const std::string& name) const = 0;
};

// Opens a tensor file by its content, never by its name: safetensors (a GGUF file is named as one and refused).
std::shared_ptr<TensorFile> open_tensor_file(const std::string& path);

}  // namespace ernie
