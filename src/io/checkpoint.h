// All tensors of one model component: one file, several files, or shards named by an index.json.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/tensor_file.h"

namespace ernie {

class Checkpoint {
 public:
  static Checkpoint open_dir(const std::string& dir);    // the component folder (*.safetensors or an index)
  static Checkpoint open_file(const std::string& path);  // one tensor file (any format) or a .index.json
  // Over tensor files already open (e.g. an adapter such as gguf_llm_as_hf); a name in two of them is an Error.
  static Checkpoint of(const std::vector<std::shared_ptr<TensorFile>>& files);
  bool contains(const std::string& name) const { return where_.count(name) > 0; }
  const TensorInfo* find(const std::string& name) const;
  Tensor tensor(const std::string& name) const;  // throws naming the tensor when absent
  Tensor stored_blocks(const std::string& name) const;  // TensorFile::stored_blocks of the file holding it
  std::vector<const TensorInfo*> tensors() const;
  const std::vector<std::shared_ptr<TensorFile>>& files() const { return files_; }
  size_t bytes_on_disk() const;

 private:
  std::vector<std::shared_ptr<TensorFile>> files_;
  std::map<std::string, std::pair<size_t, const TensorInfo*>> where_;
  void add(std::shared_ptr<TensorFile> f, const std::string& origin);
};

}  // namespace ernie
