// safetensors: mmap'd, lazy, and validated before anything in the header is trusted.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "io/tensor_file.h"

namespace ernie {

// Parses and validates a safetensors header. `file_size` is the size of the whole file. Throws Error
// naming `what` (usually the path) on any problem. Exposed for the fuzzer.
std::vector<TensorInfo> parse_safetensors_header(const void* data, size_t file_size, const std::string& what,
                                                 std::map<std::string, std::string>* metadata = nullptr);

class SafeTensorsFile : public TensorFile {
 public:
  // Maps `path`, which must be a regular file: a FIFO, a device, a folder or a symlink loop is an Error at once
  // (opened with O_NONBLOCK, so a FIFO cannot block). A file whose data checksum was never written (its
  // writer died: kDataChecksumKey still holds kDataChecksumPending) is refused unless `allow_incomplete`.
  static std::shared_ptr<SafeTensorsFile> open(const std::string& path, bool allow_incomplete = false);
  ~SafeTensorsFile() override;
  const char* format() const override { return "safetensors"; }
  const std::string& path() const override { return path_; }
  size_t file_size() const override { return size_; }
  const std::vector<TensorInfo>& tensors() const override { return infos_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const TensorInfo* find(const std::string& name) const override;
  // A zero-copy view into the mapping, or, for a tensor whose data does not start at a multiple of its
  // element size (a foreign file; ours never), an aligned copy. Only element alignment is needed here: the
  // CPU ops index elements, uploads copy bytes.
  Tensor tensor(const std::string& name) const override;
  const uint8_t* data_section() const { return base_ + data_offset_; }
  size_t header_size() const { return data_offset_ - 8; }  // N: the JSON header's bytes, padding included

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

// ---- data checksum ---------------------------------------------------------------------------------------
// Every file the writers below produce records a checksum of its tensor data in its metadata, under
// kDataChecksumKey: 16 lowercase hex digits of XXH64 (seed 0) over the 8-byte little-endian XXH64 (seed 0) of
// each tensor's bytes, taken in byte order of the tensor names. (Bytes between tensors, which older writers left
// as alignment padding, are not covered.) The header is written first with kDataChecksumPending, a value of the
// same width, and rewritten in place once the data is on disk, so a file whose writer was killed reads as
// incomplete.
inline constexpr const char* kDataChecksumKey = "ernie.data_xxh64";
inline constexpr const char* kDataChecksumPending = "incomplete------";

// XXH64 (xxHash, 64-bit) of [data, data + len).
uint64_t xxh64(const void* data, size_t len, uint64_t seed = 0);

enum class ChecksumStatus {
  None,        // no kDataChecksumKey (a file from another tool): nothing to check
  Incomplete,  // the placeholder was never replaced: the writer did not finish
  Malformed,   // a value that is neither the placeholder nor 16 hex digits
  Ok,
  Mismatch,  // the data no longer matches: corrupt, truncated and re-padded, or changed since
  Unverified,  // a checksum is stored but the data was not read (checksum_status())
};
const char* checksum_status_name(ChecksumStatus s);  // "none", "incomplete", "malformed", "ok", "mismatch", ...
struct ChecksumCheck {
  ChecksumStatus status = ChecksumStatus::None;
  std::string stored, computed;  // hex; computed only when the data was read
};
// From the metadata alone (no data read): None, Incomplete, Malformed or Unverified.
ChecksumStatus checksum_status(const std::map<std::string, std::string>& metadata);
// Reads every tensor's bytes (`threads` at once; 0: OpenMP's count) and compares with the stored value.
ChecksumCheck verify_data_checksum(const SafeTensorsFile& f, int threads = 0);

// Writes tensors (any device; copied to the host) to `path` atomically: a temp file `<path>.tmp.<random>` in the
// same folder (created exclusively, never through a symlink), fsync'd, renamed over `path`, then the folder
// fsync'd. The temp file is removed on every error and, while the write runs, on SIGINT, SIGTERM or SIGHUP
// (where the process left them at their default action; the signal is then re-raised). `path` may be a new
// file or a regular file (or a symlink, which is replaced); anything else (a device, folder or FIFO) is
// refused. The file is spec-clean for the reference safetensors library (io/safetensors_spec.h): the tensors'
// spans are contiguous from 0 to the end of the file, and the header is padded with spaces so the data
// section starts at a multiple of `align` (a power of two, 8 to 4096). Tensors whose byte size is a multiple
// of `align` come first (name order), so each starts `align`-aligned for direct upload; then the others by
// decreasing element size (then name), each starting at least at a multiple of its element size. The
// metadata gets kDataChecksumKey (see above).
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
