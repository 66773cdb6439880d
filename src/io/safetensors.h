// safetensors: mmap'd, lazy, and validated before anything in the header is trusted.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ernie {

struct TensorInfo {
  std::string name;
  DType dtype;
  Shape shape;
  size_t begin = 0, end = 0;  // byte span inside the data section
  std::string file;           // which file holds it
};

// Parses and validates a safetensors header. `file_size` is the size of the whole file. Throws Error
// naming `what` (usually the path) on any problem. Exposed for the fuzzer.
std::vector<TensorInfo> parse_safetensors_header(const void* data, size_t file_size, const std::string& what,
                                                 std::map<std::string, std::string>* metadata = nullptr);

class SafeTensorsFile {
 public:
  static std::shared_ptr<SafeTensorsFile> open(const std::string& path);
  ~SafeTensorsFile();
  const std::string& path() const { return path_; }
  size_t file_size() const { return size_; }
  const std::vector<TensorInfo>& tensors() const { return infos_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const TensorInfo* find(const std::string& name) const;
  Tensor tensor(const std::string& name) const;  // zero-copy view into the mapping
  const uint8_t* data_section() const { return base_ + data_offset_; }

 private:
  SafeTensorsFile() = default;
  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0, data_offset_ = 0;
  std::vector<TensorInfo> infos_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  std::weak_ptr<SafeTensorsFile> self_;
};

// All tensors of one component: a single file, several files, or shards named by an index.json.
class Checkpoint {
 public:
  static Checkpoint open_dir(const std::string& dir);      // the component folder
  static Checkpoint open_file(const std::string& path);    // one .safetensors or .index.json
  bool contains(const std::string& name) const { return where_.count(name) > 0; }
  const TensorInfo* find(const std::string& name) const;
  Tensor tensor(const std::string& name) const;  // throws naming the tensor when absent
  std::vector<const TensorInfo*> tensors() const;
  const std::vector<std::shared_ptr<SafeTensorsFile>>& files() const { return files_; }
  size_t bytes_on_disk() const;

 private:
  std::vector<std::shared_ptr<SafeTensorsFile>> files_;
  std::map<std::string, std::pair<size_t, const TensorInfo*>> where_;
  void add(std::shared_ptr<SafeTensorsFile> f, const std::string& origin);
};

// Writes tensors (any device; copied to the host) to `path` atomically (temp file + rename). Tensor data
// is aligned to `align` bytes from the start of the file so it can be mapped and uploaded directly.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {}, size_t align = 64);

// The same, but each tensor is produced only when it is written (converting a 16 GB model never holds
// more than one converted tensor per thread in memory). `make` must return a tensor of exactly `dtype` and
// `shape`. With `threads` > 1, that many workers each produce the next tensor and write it at its offset
// (pwrite), so `make` is called from several threads at once and in no fixed order; a worker's own OpenMP
// loops run on one thread. `progress(done, total)` is called under a lock, done growing. The first error
// (a throwing `make`, a failed write) stops the workers, removes the temp file and is rethrown.
struct PendingTensor {
  std::string name;
  DType dtype;
  Shape shape;
  std::function<Tensor()> make;
};
void save_safetensors_streamed(const std::string& path, const std::vector<PendingTensor>& tensors,
                               const std::map<std::string, std::string>& metadata, size_t align = 64,
                               const std::function<void(size_t done, size_t total)>& progress = {}, int threads = 1);

}  // namespace ernie
