#include "io/safetensors.h"

#include <fcntl.h>
#include <omp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace ernie {

namespace {
constexpr uint64_t kMaxHeader = 100ull << 20;  // 100 MB, as the reference implementation bounds it

uint64_t read_u64le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
}  // namespace

std::vector<TensorInfo> parse_safetensors_header(const void* data, size_t file_size, const std::string& what,
                                                 std::map<std::string, std::string>* metadata) {
  auto p = static_cast<const uint8_t*>(data);
  ERNIE_CHECK(file_size >= 8, what, ": file is ", std::to_string(file_size),
              " bytes, too short for a safetensors header (truncated?)");
  uint64_t n = read_u64le(p);
  ERNIE_CHECK(n <= kMaxHeader, what, ": header length ", std::to_string(n), " exceeds the 100 MB limit (corrupt file?)");
  ERNIE_CHECK(n <= file_size - 8, what, ": header length ", std::to_string(n), " runs past the end of the ",
              std::to_string(file_size), "-byte file (truncated?)");
  json h = json::parse(p + 8, p + 8 + n, nullptr, false);
  ERNIE_CHECK(!h.is_discarded(), what, ": header is not valid JSON");
  ERNIE_CHECK(h.is_object(), what, ": header is not a JSON object");
  const uint64_t data_size = file_size - 8 - n;
  std::vector<TensorInfo> out;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& e = it.value();
    if (name == "__metadata__") {
      ERNIE_CHECK(e.is_object(), what, ": __metadata__ is not an object");
      for (auto m = e.begin(); m != e.end(); ++m) {
        ERNIE_CHECK(m.value().is_string(), what, ": __metadata__ value '", m.key(), "' is not a string");
        if (metadata) (*metadata)[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    std::string where = what + ": tensor '" + name + "'";
    ERNIE_CHECK(e.is_object(), where, " is not an object");
    ERNIE_CHECK(e.contains("dtype") && e["dtype"].is_string(), where, ": missing or non-string dtype");
    ERNIE_CHECK(e.contains("shape") && e["shape"].is_array(), where, ": missing or non-array shape");
    ERNIE_CHECK(e.contains("data_offsets") && e["data_offsets"].is_array() && e["data_offsets"].size() == 2, where,
                ": data_offsets must be [begin, end]");
    TensorInfo ti;
    ti.name = name;
    std::string dt = e["dtype"].get<std::string>();
    auto d = dtype_from_name(dt);
    ERNIE_CHECK(d.has_value(), where, ": unknown dtype '", dt, "'");
    ti.dtype = *d;
    ERNIE_CHECK(e["shape"].size() <= 8, where, ": more than 8 dimensions");
    uint64_t numel = 1;
    for (const json& s : e["shape"]) {
      ERNIE_CHECK(s.is_number_unsigned(), where, ": shape entries must be non-negative integers");
      uint64_t v = s.get<uint64_t>();
      ERNIE_CHECK(v <= (1ull << 40) && (v == 0 || numel <= (1ull << 50) / v), where, ": shape is absurdly large");
      numel *= v;
      ti.shape.push_back(int64_t(v));
    }
    for (const json& o : e["data_offsets"])
      ERNIE_CHECK(o.is_number_unsigned(), where, ": data_offsets must be non-negative integers");
    uint64_t b = e["data_offsets"][0].get<uint64_t>(), en = e["data_offsets"][1].get<uint64_t>();
    ERNIE_CHECK(b <= en, where, ": data_offsets begin ", std::to_string(b), " > end ", std::to_string(en));
    ERNIE_CHECK(en <= data_size, where, ": span [", std::to_string(b), ", ", std::to_string(en),
                ") lies outside the file's ", std::to_string(data_size), "-byte data section (truncated?)");
    ERNIE_CHECK(numel * dtype_size(ti.dtype) == en - b, where, ": shape ", shape_str(ti.shape), " of ", dt, " needs ",
                std::to_string(numel * dtype_size(ti.dtype)), " bytes but the span holds ", std::to_string(en - b));
    ti.begin = size_t(b);
    ti.end = size_t(en);
    ti.file = what;
    out.push_back(std::move(ti));
  }
  std::vector<const TensorInfo*> by_off;
  for (auto& t : out) by_off.push_back(&t);
  std::sort(by_off.begin(), by_off.end(), [](auto a, auto b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_off.size(); ++i)
    ERNIE_CHECK(by_off[i]->begin >= by_off[i - 1]->end || by_off[i]->begin == by_off[i]->end, what, ": tensors '",
                by_off[i - 1]->name, "' and '", by_off[i]->name, "' overlap in the file");
  return out;
}

std::shared_ptr<SafeTensorsFile> SafeTensorsFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ERNIE_CHECK(fd >= 0, path, ": cannot open (", std::strerror(errno), ")");
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, ": not a regular file");
  }
  std::shared_ptr<SafeTensorsFile> f(new SafeTensorsFile());
  f->path_ = path;
  f->size_ = size_t(st.st_size);
  if (f->size_ > 0) {
    void* m = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      ::close(fd);
      fail(path, ": mmap failed (", std::strerror(errno), ")");
    }
    f->base_ = static_cast<const uint8_t*>(m);
  }
  ::close(fd);
  static const uint8_t kEmpty[1] = {0};
  f->infos_ = parse_safetensors_header(f->base_ ? f->base_ : kEmpty, f->size_, path, &f->metadata_);
  f->data_offset_ = 8 + size_t(read_u64le(f->base_));
  for (size_t i = 0; i < f->infos_.size(); ++i) f->index_[f->infos_[i].name] = i;
  f->self_ = f;
  return f;
}

SafeTensorsFile::~SafeTensorsFile() {
  if (base_) munmap(const_cast<uint8_t*>(base_), size_);
}

const TensorInfo* SafeTensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &infos_[it->second];
}

Tensor SafeTensorsFile::tensor(const std::string& name) const {
  const TensorInfo* ti = find(name);
  ERNIE_CHECK(ti, path_, ": no tensor named '", name, "'");
  return Tensor::borrow(data_section() + ti->begin, ti->shape, ti->dtype, self_.lock());
}

// ---- Checkpoint -------------------------------------------------------------------------------------

void Checkpoint::add(std::shared_ptr<SafeTensorsFile> f, const std::string& origin) {
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
    std::ifstream in(path);
    ERNIE_CHECK(in, path, ": cannot open");
    json j = json::parse(in, nullptr, false);
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
      ERNIE_CHECK(fs::exists(sp), path, ": shard '", shard, "' is named in the index but missing");
      auto f = SafeTensorsFile::open(sp);
      for (const std::string& n : names)
        ERNIE_CHECK(f->find(n), path, ": index puts tensor '", n, "' in '", shard, "' but that shard lacks it");
      c.add(f, path);
    }
  } else {
    c.add(SafeTensorsFile::open(path), path);
  }
  return c;
}

Checkpoint Checkpoint::open_dir(const std::string& dir) {
  ERNIE_CHECK(fs::is_directory(dir), dir, ": folder is missing");
  std::vector<std::string> index, single;
  for (auto& e : fs::directory_iterator(dir)) {
    std::string n = e.path().filename().string();
    if (n.ends_with(".safetensors.index.json")) index.push_back(e.path().string());
    else if (n.ends_with(".safetensors")) single.push_back(e.path().string());
  }
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

// ---- writer -----------------------------------------------------------------------------------------

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata, size_t align) {
  std::vector<PendingTensor> pending;
  for (const auto& [name, t] : tensors) pending.push_back({name, t.dtype(), t.shape(), [t = t] { return t; }});
  save_safetensors_streamed(path, pending, metadata, align);
}

namespace {
// Writes all of [p, p + n) at `off`; false on any error (errno set).
bool pwrite_all(int fd, const void* p, size_t n, size_t off) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t k = ::pwrite(fd, c, std::min<size_t>(n, size_t(1) << 30), off_t(off));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k, n -= size_t(k), off += size_t(k);
  }
  return true;
}
}  // namespace

void save_safetensors_streamed(const std::string& path, const std::vector<PendingTensor>& tensors,
                               const std::map<std::string, std::string>& metadata, size_t align,
                               const std::function<void(size_t, size_t)>& progress, int threads) {
  ERNIE_CHECK(align > 0 && align <= 4096, "save_safetensors: alignment ", std::to_string(align), " out of range");
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::vector<size_t> offs;
  size_t off = 0;
  for (const PendingTensor& t : tensors) {
    off = (off + align - 1) / align * align;
    offs.push_back(off);
    size_t bytes = size_t(shape_numel(t.shape)) * dtype_size(t.dtype);
    h[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + bytes}}};
    off += bytes;
  }
  const size_t total = off;
  std::string hs = h.dump();
  // Pad the header with spaces so the data section starts on an `align` boundary.
  const size_t data_start = (8 + hs.size() + align - 1) / align * align;
  hs.append(data_start - 8 - hs.size(), ' ');
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i) head[size_t(i)] = char(uint8_t(uint64_t(hs.size()) >> (8 * i)));
  head += hs;

  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ERNIE_CHECK(fd >= 0, path, ": cannot write (", std::strerror(errno), ")");
  // The final size up front: the gaps between tensors read as zeros, and a full disk fails here (where the
  // file system can reserve space) rather than half way.
  bool ok = ::ftruncate(fd, off_t(data_start + total)) == 0;
  if (ok && ::fallocate(fd, 0, 0, off_t(data_start + total)) != 0)
    ok = errno == EOPNOTSUPP || errno == ENOSYS;  // not supported by this file system: space is taken as written
  ok = ok && pwrite_all(fd, head.data(), head.size(), 0);
  // Tensors are produced and written by `threads` workers (OpenMP threads), each taking the next tensor in
  // file order and writing it at its own offset, so at most `threads` produced tensors are held at once.
  std::atomic<bool> failed{!ok};
  std::exception_ptr error;
  std::mutex mu;
  size_t done = 0;
  int write_errno = ok ? 0 : errno;
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; !failed && (i = next++) < tensors.size();) {
      try {
        Tensor t = tensors[i].make();
        ERNIE_CHECK(t.dtype() == tensors[i].dtype && t.shape() == tensors[i].shape, path, ": tensor '",
                    tensors[i].name, "' was produced as ", dtype_name(t.dtype()), " ", shape_str(t.shape()),
                    ", announced as ", dtype_name(tensors[i].dtype), " ", shape_str(tensors[i].shape));
        Tensor c = t.device().is_cpu() ? t : t.to(kCPU);
        const bool wrote = pwrite_all(fd, c.raw(), c.nbytes(), data_start + offs[i]);
        std::lock_guard<std::mutex> lock(mu);
        if (!wrote) {
          if (!write_errno) write_errno = errno ? errno : EIO;
          failed = true;
          break;
        }
        done += c.nbytes();
        if (progress) progress(done, total);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
  };
  const int n = std::max(1, std::min<int>(threads, int(tensors.size())));
  if (n == 1) {
    worker();
  } else {
#pragma omp parallel num_threads(n)
    {
      omp_set_num_threads(1);  // a worker's own parallel loops (quantize, cast) run on that worker alone
      worker();
    }
  }
  if (::close(fd) != 0 && !failed) write_errno = errno, failed = true;
  ok = !failed;
  if (!ok) {
    std::remove(tmp.c_str());
    if (error) std::rethrow_exception(error);
    fail(path, ": write failed (", std::strerror(write_errno), "; disk full?)");
  }
  ERNIE_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, path, ": cannot rename temp file (", std::strerror(errno), ")");
}

}  // namespace ernie
