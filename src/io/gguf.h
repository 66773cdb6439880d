// GGUF (llama.cpp / ggml's file format, versions 2 and 3, little-endian): mmap'd and validated before anything
// in it is trusted. Tensors stored as F32, F16 or BF16 (and I8, I32, I64) are zero-copy views; block-quantized
// ones (Q4_0 ... Q6_K, IQ4_NL, IQ4_XS: core/ggml_types.h) come back de-quantized to F32 on the host.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/tensor_file.h"

namespace ernie {

// GGUF value types (the ids the format stores).
enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9,
  U64 = 10, I64 = 11, F64 = 12,
};
const char* gguf_type_name(GgufType t);  // "u32", "string", "array", ...

// One metadata value. `bytes` views the file's mapping (valid while the file is open): a scalar's bytes, a
// string's text, or an array's elements as stored (strings there keep their u64 length prefixes).
struct GgufValue {
  GgufType type = GgufType::U8;
  GgufType elem = GgufType::U8;  // arrays: the element type (never an array)
  uint64_t count = 0;            // arrays: the element count
  std::string_view bytes;
  bool is_integer() const;  // U8..I64 but floats and bools
  // Each throws Error naming `key` when the value has another type.
  std::string str(const std::string& key) const;
  int64_t integer(const std::string& key) const;  // any integer type (a u64 above INT64_MAX is refused)
  double number(const std::string& key) const;    // any integer or float type
  bool boolean(const std::string& key) const;
  std::vector<std::string> strings(const std::string& key) const;  // an array of strings
  std::vector<int64_t> integers(const std::string& key) const;     // an array of integers or bools
  std::vector<double> numbers(const std::string& key) const;       // an array of integers or floats
};

struct GgufHeader {
  uint32_t version = 0;
  std::map<std::string, GgufValue> metadata;
  std::vector<TensorInfo> tensors;  // file order; ggml_type set; dtype F32 for block-quantized tensors
  size_t alignment = 32;            // general.alignment
  size_t data_offset = 0;           // where the data section starts in the file
};

// Parses and validates a GGUF header of a file of `size` bytes at `data`: every count and length within the
// file, tensor shapes, types, alignment and spans. Throws Error naming `what` (the path). For the fuzzer too.
GgufHeader parse_gguf(const void* data, size_t size, const std::string& what);

class GgufFile : public TensorFile {
 public:
  // Maps `path` (a regular file; anything else is an Error at once) and parses it.
  static std::shared_ptr<GgufFile> open(const std::string& path);
  ~GgufFile() override;
  const char* format() const override { return "gguf"; }
  const std::string& path() const override { return path_; }
  size_t file_size() const override { return size_; }
  const std::vector<TensorInfo>& tensors() const override { return h_.tensors; }
  const TensorInfo* find(const std::string& name) const override;
  Tensor tensor(const std::string& name) const override;
  Tensor stored_blocks(const std::string& name) const override;
  uint32_t version() const { return h_.version; }
  const std::map<std::string, GgufValue>& metadata() const { return h_.metadata; }
  const GgufValue* meta(const std::string& key) const;  // nullptr when absent
  // A string value, or nullopt when absent (an Error when of another type).
  std::optional<std::string> meta_string(const std::string& key) const;

 private:
  GgufFile() = default;
  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  GgufHeader h_;
  std::map<std::string, size_t> index_;
  std::weak_ptr<GgufFile> self_;
};

// Decodes the tensor `ti` of a parsed header from the file bytes at `file` to a new F32 (block types) or a
// copy in its own dtype. For the fuzzer and tests; GgufFile::tensor() is the zero-copy path.
Tensor gguf_tensor_copy(const GgufHeader& h, const TensorInfo& ti, const uint8_t* file);

}  // namespace ernie
