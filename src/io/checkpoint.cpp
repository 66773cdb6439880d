#include "io/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"
#include "io/gguf.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace ernie {

std::shared_ptr<TensorFile> open_tensor_file(const std::string& path) {
  if (read_file_head(path, 4) == "GGUF") return GgufFile::open(path);
  return SafeTensorsFile::open(path);
}

void Checkpoint::add(std::shared_ptr<TensorFile> f, const std::string& origin) {
  size_t idx = files_.size();
  files_.push_back(f);
  for (const TensorInfo& ti : f->tensors()) {
    ERNIE_CHECK(!where_.count(ti.name), origin, ": tensor '", ti.name, "' appears in two files");
    where_[ti.name] = {idx, &ti};
  }
}

Checkpoint Checkpoint::open_file(const std::string& path) {
  Checkpoint c;
  if (path.size() > 11 && path.ends_with(".index.json")) {
    json j = json::parse(read_regular_file(path, size_t(100) << 20), nullptr, false);
    ERNIE_CHECK(!j.is_discarded() && j.is_object(), path, ": not valid JSON");
    ERNIE_CHECK(j.contains("weight_map") && j["weight_map"].is_object(), path, ": missing object 'weight_map'");
    std::map<std::string, std::vector<std::string>> by_shard;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      ERNIE_CHECK(it.value().is_string(), path, ": weight_map['", it.key(), "'] is not a file name");
      std::string shard = it.value().get<std::string>();
      ERNIE_CHECK(shard.find('/') == std::string::npos && shard != ".." && !shard.empty(), path,
                  ": weight_map names an invalid shard '", shard, "'");
      by_shard[shard].push_back(it.key());
    }
    std::string dir = fs::path(path).parent_path().string();
    for (auto& [shard, names] : by_shard) {
      std::string sp = (fs::path(dir) / shard).string();
      std::error_code ec;
      ERNIE_CHECK(fs::exists(fs::symlink_status(sp, ec)), path, ": shard '", shard, "' is named in the index but missing");
      std::shared_ptr<TensorFile> f = SafeTensorsFile::open(sp);
      for (const std::string& n : names)
        ERNIE_CHECK(f->find(n), path, ": index puts tensor '", n, "' in '", shard, "' but that shard lacks it");
      c.add(f, path);
    }
  } else {
    c.add(open_tensor_file(path), path);
  }
  return c;
}

Checkpoint Checkpoint::of(const std::vector<std::shared_ptr<TensorFile>>& files) {
  Checkpoint c;
  for (const auto& f : files) {
    ERNIE_CHECK(f != nullptr, "Checkpoint::of: a null tensor file");
    c.add(f, f->path());
  }
  return c;
}

Checkpoint Checkpoint::open_dir(const std::string& dir) {
  std::error_code ec;
  ERNIE_CHECK(fs::is_directory(dir, ec), dir, ": folder is missing", ec ? " (" + ec.message() + ")" : "");
  std::vector<std::string> index, single;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string n = it->path().filename().string();
    if (n.ends_with(".safetensors.index.json")) index.push_back(it->path().string());
    else if (n.ends_with(".safetensors")) single.push_back(it->path().string());
  }
  ERNIE_CHECK(!ec, dir, ": cannot list the folder (", ec.message(), ")");
  std::sort(index.begin(), index.end());
  std::sort(single.begin(), single.end());
  ERNIE_CHECK(index.size() <= 1, dir, ": more than one *.safetensors.index.json");
  if (!index.empty()) return open_file(index[0]);
  ERNIE_CHECK(!single.empty(), dir, ": no *.safetensors file");
  Checkpoint c;
  for (auto& s : single) c.add(SafeTensorsFile::open(s), s);
  return c;
}

const TensorInfo* Checkpoint::find(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? nullptr : it->second.second;
}

Tensor Checkpoint::tensor(const std::string& name) const {
  auto it = where_.find(name);
  ERNIE_CHECK(it != where_.end(), "checkpoint has no tensor '", name, "'");
  return files_[it->second.first]->tensor(name);
}

Tensor Checkpoint::stored_blocks(const std::string& name) const {
  auto it = where_.find(name);
  ERNIE_CHECK(it != where_.end(), "checkpoint has no tensor '", name, "'");
  return files_[it->second.first]->stored_blocks(name);
}

std::vector<const TensorInfo*> Checkpoint::tensors() const {
  std::vector<const TensorInfo*> v;
  for (auto& [n, w] : where_) v.push_back(w.second);
  return v;
}

size_t Checkpoint::bytes_on_disk() const {
  size_t s = 0;
  for (auto& f : files_) s += f->file_size();
  return s;
}

}  // namespace ernie
