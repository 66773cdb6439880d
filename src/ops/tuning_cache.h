// The kernel tuning cache: choices the engine measured (cuBLASLt GEMM algorithms, cuDNN convolution
// algorithms) per shape, kept as JSON so that the next process starts at full speed. One file per GPU
// model and library versions (the `identity`), in $ERNIE_CACHE_DIR, else $XDG_CACHE_HOME/ernie-image, else
// $HOME/.cache/ernie-image. ERNIE_TUNE=0 turns measuring off: heuristic choices, nothing read or written.
#pragma once
#include <nlohmann/json.hpp>
#include <mutex>
#include <optional>
#include <string>

namespace ernie::tuning {

std::string cache_dir();  // "" when no directory can be named (no HOME)
bool enabled();

class Cache {
 public:
  // The cache of one identity ("NVIDIA H200 cc9.0 cublasLt 130100 cudnn 91400"), read on first use; an
  // unreadable or foreign file is ignored (and replaced on the next store).
  static Cache& of(const std::string& identity);
  // A cache kept in `dir` ("" keeps it in memory only).
  Cache(std::string identity, const std::string& dir);

  std::optional<nlohmann::json> find(const std::string& key);
  // Records a choice and rewrites the file (temporary file + rename, so readers never see half of it).
  // A file that cannot be written costs one warning on stderr, never an error.
  void store(const std::string& key, nlohmann::json value);
  const std::string& path() const { return path_; }

 private:
  std::mutex mu_;
  std::string identity_, path_;
  nlohmann::json entries_ = nlohmann::json::object();
  bool warned_ = false;
};

// For `doctor`: the directory, whether tuning is on, and every cache file in it with its identity and
// number of entries.
nlohmann::json report();

}  // namespace ernie::tuning
