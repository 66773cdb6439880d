#include "io/safetensors.h"

#include <fcntl.h>
#include <omp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "core/atomic_file.h"
#include "core/error.h"
#include "io/safetensors_spec.h"

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


// Opens `path` read-only without blocking (a FIFO would block a plain open) and checks it is a regular file;
// the descriptor and the size. Throws Error naming the path and what it is instead.
int open_regular(const std::string& path, size_t* size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ERNIE_CHECK(fd >= 0, path, ": cannot open (", std::strerror(errno), ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail(path, ": cannot stat (", std::strerror(e), ")");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, ": is ", file_kind_name(st.st_mode), ", not a regular file");
  }
  *size = size_t(st.st_size);
  return fd;
}

bool json_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string hex_byte(uint8_t c) {
  const char* d = "0123456789abcdef";
  return {d[c >> 4], d[c & 15]};
}

// Where the JSON object or array at the start of [p, p + n) ends (after leading whitespace): one past its
// closing bracket, found by counting brackets outside strings. `n` when it does not close (the parser then
// reports the broken JSON) or does not start with a bracket.
size_t json_value_end(const uint8_t* p, size_t n) {
  size_t i = 0;
  while (i < n && json_space(p[i])) ++i;
  if (i == n || (p[i] != '{' && p[i] != '[')) return n;
  size_t depth = 0;
  for (; i < n; ++i) {
    const uint8_t c = p[i];
    if (c == '"') {
      for (++i; i < n && p[i] != '"'; ++i)
        if (p[i] == '\\') ++i;
      if (i >= n) return n;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    } else if (c == 0) {
      return n;  // refused as a NUL byte
    }
  }
  return n;
}

// Finds the first duplicate key in any object (nlohmann keeps the last one silently; the reference
// implementation refuses them): a SAX pass with one set of keys per open object, linear in the header. (The
// parser-callback route is quadratic: nlohmann's callback DOM parser rescans the parent object at the end
// of every child object, 13 s for 20k tensors.)
struct DuplicateKeyFinder : nlohmann::json_sax<json> {
  std::vector<std::unordered_set<std::string>> keys;  // keys[d]: the keys of the open object at depth d
  size_t depth = 0;
  std::string dup, dup_in, top;  // the first duplicate, the top-level entry it is in, the current top-level key

  bool start_object(std::size_t) override {
    if (keys.size() <= depth) keys.emplace_back();
    else if (keys[depth].bucket_count() > 64) keys[depth] = {};  // a large set is not cleared per small object
    else keys[depth].clear();
    ++depth;
    return true;
  }
  bool end_object() override {
    --depth;
    return true;
  }
  bool key(string_t& k) override {
    if (depth == 1) top = k;
    if (depth == 0 || keys[depth - 1].insert(k).second) return true;
    dup = k;
    dup_in = depth == 1 ? "" : top;
    return false;  // stop at the first
  }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
};

json parse_header_json(const uint8_t* b, const uint8_t* e, const std::string& what) {
  json h;
  try {
    h = json::parse(b, e);
  } catch (const json::exception& x) {
    fail(what, ": header is not valid JSON (", x.what(), ")");
  }
  DuplicateKeyFinder d;
  json::sax_parse(b, e, &d);
  if (!d.dup.empty()) {
    if (d.dup_in.empty() && d.dup == "__metadata__") fail(what, ": header has two __metadata__ entries");
    if (d.dup_in.empty()) fail(what, ": header names tensor '", d.dup, "' twice");
    fail(what, ": header entry '", d.dup_in, "' has key '", d.dup, "' twice");
  }
  return h;
}
}  // namespace

std::vector<TensorInfo> parse_safetensors_header(const void* data, size_t file_size, const std::string& what,
                                                 std::map<std::string, std::string>* metadata) {
  auto p = static_cast<const uint8_t*>(data);
  ERNIE_CHECK(file_size >= 8, what, ": file is ", std::to_string(file_size),
              " bytes, too short for a safetensors header (truncated?)");
  uint64_t n = read_u64le(p);
  // A safetensors file is its header's length, then the JSON header: anything else is another kind of file,
  // named so instead of reporting an absurd header length.
  ERNIE_CHECK(n <= kMaxHeader || (file_size > 8 && p[8] == '{'), what,
              ": not a safetensors file (one opens with the size of its JSON header, then that JSON)");
  ERNIE_CHECK(n <= kMaxHeader, what, ": header length ", std::to_string(n), " exceeds the 100 MB limit (corrupt file?)");
  ERNIE_CHECK(n <= file_size - 8, what, ": header length ", std::to_string(n), " runs past the end of the ",
              std::to_string(file_size), "-byte file (truncated?)");
  // Only whitespace (the format pads with spaces) may follow the JSON value. nlohmann stops at a NUL byte as
  // if the input ended there, so the end of the value is found here and a NUL anywhere (never valid JSON,
  // where it must be written \u0000) is refused.
  const uint8_t* hb = p + 8;
  const size_t hn = json_value_end(hb, size_t(n));
  for (size_t i = hn; i < size_t(n); ++i)
    ERNIE_CHECK(json_space(hb[i]), what, ": header has bytes after its JSON object that are not space padding (byte ",
                std::to_string(8 + i), " is 0x", hex_byte(hb[i]), "; corrupt file?)");
  ERNIE_CHECK(std::memchr(hb, 0, hn) == nullptr, what, ": header holds a NUL byte (corrupt file?)");
  json h = parse_header_json(hb, hb + hn, what);
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

std::shared_ptr<SafeTensorsFile> SafeTensorsFile::open(const std::string& path, bool allow_incomplete) {
  size_t size = 0;
  const int fd = open_regular(path, &size);
  std::shared_ptr<SafeTensorsFile> f(new SafeTensorsFile());
  f->path_ = path;
  f->size_ = size;
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
  ERNIE_CHECK(allow_incomplete || checksum_status(f->metadata_) != ChecksumStatus::Incomplete, path,
              ": incomplete file: its writer never finished (metadata '", kDataChecksumKey,
              "' still holds the placeholder; a killed convert?). Write it again");
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
  const uint8_t* p = data_section() + ti->begin;
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(ti->dtype) == 0)
    return Tensor::borrow(p, ti->shape, ti->dtype, self_.lock());
  Tensor t = Tensor::empty(ti->shape, ti->dtype);  // misaligned for its elements: copied
  if (ti->end > ti->begin) std::memcpy(t.raw(), p, ti->end - ti->begin);
  return t;
}

// ---- writer -----------------------------------------------------------------------------------------

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata, size_t align) {
  std::vector<PendingTensor> pending;
  for (const auto& [name, t] : tensors) pending.push_back({name, t.dtype(), t.shape(), [t = t] { return t; }});
  save_safetensors_streamed(path, pending, metadata, align);
}

namespace {
std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

// The file's data checksum from its tensors' hashes: XXH64 over their little-endian bytes in name order.
uint64_t combine_tensor_hashes(std::vector<std::pair<std::string_view, uint64_t>> named) {
  std::sort(named.begin(), named.end());
  std::string buf;
  buf.reserve(named.size() * 8);
  for (const auto& [name, h] : named)
    for (int i = 0; i < 8; ++i) buf.push_back(char(uint8_t(h >> (8 * i))));
  return xxh64(buf.data(), buf.size());
}
}  // namespace

void save_safetensors_streamed(const std::string& path, const std::vector<PendingTensor>& tensors,
                               const std::map<std::string, std::string>& metadata, size_t align,
                               const std::function<void(size_t, size_t)>& progress, int threads) {
  ERNIE_CHECK(align >= 8 && align <= 4096 && (align & (align - 1)) == 0, "save_safetensors: alignment ",
              std::to_string(align), " is not a power of two from 8 to 4096");
  std::map<std::string, std::string> meta = metadata;
  meta[kDataChecksumKey] = kDataChecksumPending;
  json h = json::object();
  h["__metadata__"] = meta;
  // Contiguous spans (the reference library's rule), ordered for alignment: io/safetensors_spec.h.
  std::vector<LayoutItem> items;
  for (const PendingTensor& t : tensors)
    items.push_back({t.name, size_t(shape_numel(t.shape)) * dtype_size(t.dtype), dtype_size(t.dtype)});
  const std::vector<size_t> offs = safetensors_data_layout(items, align);
  size_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const PendingTensor& t = tensors[i];
    ERNIE_CHECK(!h.contains(t.name), path, ": tensor name '", t.name, "' given twice (or reserved)");
    h[t.name] = {{"dtype", dtype_name(t.dtype)},
                 {"shape", t.shape},
                 {"data_offsets", {offs[i], offs[i] + items[i].bytes}}};
    total += items[i].bytes;
  }
  std::string hs = h.dump();
  // Pad the header with spaces so the data section starts on an `align` boundary (N then a multiple of 8).
  const size_t data_start = (8 + hs.size() + align - 1) / align * align;
  hs.append(data_start - 8 - hs.size(), ' ');
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i) head[size_t(i)] = char(uint8_t(uint64_t(hs.size()) >> (8 * i)));
  head += hs;
  // Where the checksum's placeholder value lies in the header: rewritten there, same width, at the end.
  const std::string entry = std::string("\"") + kDataChecksumKey + "\":\"" + kDataChecksumPending + "\"";
  const size_t entry_at = head.find(entry);
  ERNIE_CHECK(entry_at != std::string::npos && head.find(entry, entry_at + 1) == std::string::npos, path,
              ": internal error: the checksum placeholder is not in the header once");
  const size_t value_at = entry_at + entry.size() - 1 - std::strlen(kDataChecksumPending);

  AtomicFile out(path);  // checks the target before anything is written
  // The final size up front: a full disk fails here (where the file system can reserve space) rather than
  // half way.
  const int fd = out.fd();
  if (::ftruncate(fd, off_t(data_start + total)) != 0 ||
      (::fallocate(fd, 0, 0, off_t(data_start + total)) != 0 && errno != EOPNOTSUPP && errno != ENOSYS)) {
    const int e = errno;  // fallocate unsupported by this file system: space is taken as written
    fail(path, ": cannot reserve ", std::to_string(data_start + total), " bytes (", std::strerror(e), "; disk full?)");
  }
  out.pwrite(head.data(), head.size(), 0);
  // Tensors are produced and written by `threads` workers (OpenMP threads), each taking the next tensor in
  // the caller's order and writing it at its own offset, so at most `threads` produced tensors are held at once.
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex mu;
  size_t done = 0;
  std::atomic<size_t> next{0};
  std::vector<uint64_t> hashes(tensors.size());
  auto worker = [&] {
    for (size_t i; !failed && (i = next++) < tensors.size();) {
      try {
        Tensor t = tensors[i].make();
        ERNIE_CHECK(t.dtype() == tensors[i].dtype && t.shape() == tensors[i].shape, path, ": tensor '",
                    tensors[i].name, "' was produced as ", dtype_name(t.dtype()), " ", shape_str(t.shape()),
                    ", announced as ", dtype_name(tensors[i].dtype), " ", shape_str(tensors[i].shape));
        Tensor c = t.device().is_cpu() ? t : t.to(kCPU);
        hashes[i] = xxh64(c.raw(), c.nbytes());
        out.pwrite(c.raw(), c.nbytes(), data_start + offs[i]);
        std::lock_guard<std::mutex> lock(mu);
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
  if (error) std::rethrow_exception(error);  // `out` removes the temp file
  // All data written: the checksum replaces its placeholder, in place.
  std::vector<std::pair<std::string_view, uint64_t>> named;
  named.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) named.emplace_back(tensors[i].name, hashes[i]);
  const std::string sum = hex64(combine_tensor_hashes(std::move(named)));
  out.pwrite(sum.data(), sum.size(), value_at);
  out.commit();
}

// ---- data checksum --------------------------------------------------------------------------------------

namespace {
constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full, kP3 = 0x165667B19E3779F9ull,
                   kP4 = 0x85EBCA77C2B2AE63ull, kP5 = 0x27D4EB2F165667C5ull;
inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}
inline uint64_t load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap32(v);
  return v;
}
inline uint64_t xxh_round(uint64_t acc, uint64_t in) { return rotl64(acc + in * kP2, 31) * kP1; }
inline uint64_t xxh_merge(uint64_t h, uint64_t v) { return (h ^ xxh_round(0, v)) * kP1 + kP4; }
}  // namespace

// XXH64 as specified by its author (github.com/Cyan4973/xxHash, doc/xxhash_spec.md).
uint64_t xxh64(const void* data, size_t len, uint64_t seed) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  const uint8_t* const end = p + len;
  uint64_t h;
  if (len >= 32) {
    uint64_t v1 = seed + kP1 + kP2, v2 = seed + kP2, v3 = seed, v4 = seed - kP1;
    const uint8_t* const limit = end - 32;
    do {
      v1 = xxh_round(v1, load64(p));
      v2 = xxh_round(v2, load64(p + 8));
      v3 = xxh_round(v3, load64(p + 16));
      v4 = xxh_round(v4, load64(p + 24));
      p += 32;
    } while (p <= limit);
    h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
    h = xxh_merge(h, v1);
    h = xxh_merge(h, v2);
    h = xxh_merge(h, v3);
    h = xxh_merge(h, v4);
  } else {
    h = seed + kP5;
  }
  h += uint64_t(len);
  for (; end - p >= 8; p += 8) h = rotl64(h ^ xxh_round(0, load64(p)), 27) * kP1 + kP4;
  if (end - p >= 4) {
    h = rotl64(h ^ (load32(p) * kP1), 23) * kP2 + kP3;
    p += 4;
  }
  for (; p < end; ++p) h = rotl64(h ^ (uint64_t(*p) * kP5), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

const char* checksum_status_name(ChecksumStatus s) {
  switch (s) {
    case ChecksumStatus::None: return "none";
    case ChecksumStatus::Incomplete: return "incomplete";
    case ChecksumStatus::Malformed: return "malformed";
    case ChecksumStatus::Ok: return "ok";
    case ChecksumStatus::Mismatch: return "mismatch";
    case ChecksumStatus::Unverified: return "not verified";
  }
  return "?";
}

ChecksumStatus checksum_status(const std::map<std::string, std::string>& metadata) {
  auto it = metadata.find(kDataChecksumKey);
  if (it == metadata.end()) return ChecksumStatus::None;
  if (it->second == kDataChecksumPending) return ChecksumStatus::Incomplete;
  const bool hex = it->second.size() == 16 && std::all_of(it->second.begin(), it->second.end(), [](char c) {
                     return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                   });
  return hex ? ChecksumStatus::Unverified : ChecksumStatus::Malformed;
}

ChecksumCheck verify_data_checksum(const SafeTensorsFile& f, int threads) {
  ChecksumCheck r;
  r.status = checksum_status(f.metadata());
  if (r.status == ChecksumStatus::None) return r;
  r.stored = f.metadata().at(kDataChecksumKey);
  if (r.status != ChecksumStatus::Unverified) return r;
  const std::vector<TensorInfo>& ts = f.tensors();
  std::vector<uint64_t> h(ts.size());
  const uint8_t* data = f.data_section();
  const int n = std::max(1, threads > 0 ? threads : omp_get_max_threads());
#pragma omp parallel for schedule(dynamic, 1) num_threads(n)
  for (int64_t i = 0; i < int64_t(ts.size()); ++i) h[size_t(i)] = xxh64(data + ts[size_t(i)].begin, ts[size_t(i)].end - ts[size_t(i)].begin);
  std::vector<std::pair<std::string_view, uint64_t>> named;
  named.reserve(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) named.emplace_back(ts[i].name, h[i]);
  r.computed = hex64(combine_tensor_hashes(std::move(named)));
  r.status = r.computed == r.stored ? ChecksumStatus::Ok : ChecksumStatus::Mismatch;
  return r;
}

}  // namespace ernie
