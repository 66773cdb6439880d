#include "engine/lora_library.h"

#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "core/error.h"
#include "core/file.h"
#include "io/safetensors.h"

namespace ernie {
namespace fs = std::filesystem;

namespace {

constexpr const char* kExt = ".safetensors";
constexpr size_t kMaxCached = 8;  // adapters kept loaded (a rank-32 adapter on every block: ~0.4 GB)

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// A decimal number as A1111 writes it: [+-] digits [. digits] [e [+-] digits]; never hex (0x10), inf or nan,
// which strtof would take.
bool is_decimal(const std::string& s) {
  size_t i = 0, digits = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) ++digits;
  if (i < s.size() && s[i] == '.')
    for (++i; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) ++digits;
  if (digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    size_t e = 0;
    for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) ++e;
    if (e == 0) return false;
  }
  return i == s.size();
}

float parse_scale(const std::string& s, const std::string& tag) {
  const float v = is_decimal(s) ? std::strtof(s.c_str(), nullptr) : NAN;
  ERNIE_CHECK(std::isfinite(v), "prompt tag ", tag, ": the scale '", s, "' is not a decimal number");
  return v;
}

// SHA-256 of the bytes of `fd` from `offset` to the end, as hex.
std::string sha256_hex(int fd, size_t offset, const std::string& path) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ERNIE_CHECK(ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1, "sha256: OpenSSL could not start a digest");
  std::vector<unsigned char> buf(size_t(1) << 20);
  bool ok = true;
  for (off_t at = off_t(offset);;) {
    const ssize_t n = pread(fd, buf.data(), buf.size(), at);
    if (n < 0) ok = false;
    if (n <= 0) break;
    EVP_DigestUpdate(ctx, buf.data(), size_t(n));
    at += n;
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, md, &len);
  EVP_MD_CTX_free(ctx);
  ERNIE_CHECK(ok, path, ": read error while hashing");
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned i = 0; i < len; ++i) s += hex[md[i] >> 4], s += hex[md[i] & 15];
  return s;
}

}  // namespace

std::string strip_lora_tags(const std::string& prompt, std::vector<LoraRef>* tags) {
  static const std::string open = "<lora:";
  std::string out;
  size_t at = 0;
  bool found = false;
  for (size_t p; (p = prompt.find(open, at)) != std::string::npos;) {
    const size_t close = prompt.find('>', p);
    const std::string start = prompt.substr(p, std::min<size_t>(40, prompt.size() - p));
    ERNIE_CHECK(close != std::string::npos, "prompt tag '", start, "' is not closed with '>'");
    const std::string tag = prompt.substr(p, close + 1 - p);
    const std::string body = prompt.substr(p + open.size(), close - p - open.size());
    const size_t colon = body.find(':');
    LoraRef r;
    r.name = body.substr(0, colon);
    r.from_tag = true;
    ERNIE_CHECK(!r.name.empty(), "prompt tag ", tag, " names no LoRA (write <lora:NAME:SCALE>)");
    if (colon != std::string::npos) {
      const std::string rest = body.substr(colon + 1);
      ERNIE_CHECK(rest.find(':') == std::string::npos, "prompt tag ", tag, " has more than one scale; this model's ",
                  "text encoder takes no LoRA, so write <lora:NAME:SCALE> with the DiT's scale only");
      r.scale = parse_scale(rest, tag);
    }
    if (tags) tags->push_back(r);
    found = true;
    out += prompt.substr(at, p - at);
    at = close + 1;
    // A tag between two spaces takes one of them along.
    if (!out.empty() && is_space(out.back()) && (at == prompt.size() || is_space(prompt[at]))) out.pop_back();
  }
  out += prompt.substr(at);
  const size_t b = out.find_first_not_of(" \t\r\n"), e = out.find_last_not_of(" \t\r\n");
  return !found ? out : b == std::string::npos ? "" : out.substr(b, e + 1 - b);
}

LoraRef parse_lora_flag(const std::string& arg) {
  LoraRef r;
  r.path = arg;
  const size_t colon = arg.rfind(':');
  if (colon != std::string::npos) {
    const std::string tail = arg.substr(colon + 1);
    if (is_decimal(tail)) {
      r.path = arg.substr(0, colon), r.scale = std::strtof(tail.c_str(), nullptr);
    } else {
      // A ':' before a path (C:/loras/x) is the path's; one before something number-like (0x10, 1e, .5x) is a
      // scale that is not decimal.
      char* end = nullptr;
      std::strtof(tail.c_str(), &end);
      ERNIE_CHECK(end == tail.c_str() || tail[0] == '/' || tail[0] == '\\', "--lora '", arg, "': the scale '", tail,
                  "' is not a decimal number (write FILE:0.8)");
    }
  }
  ERNIE_CHECK(!r.path.empty(), "--lora '", arg, "': no file given (write --lora FILE or --lora FILE:SCALE)");
  return r;
}

std::string lora_short_hash(const std::string& path) {
  size_t size = 0;
  const int fd = open_regular_file(path, &size);
  size_t offset = 0;
  unsigned char head[8];
  if (size >= 8 && pread(fd, head, 8, 0) == 8 && std::string(reinterpret_cast<char*>(head), 4) != "GGUF") {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = n << 8 | head[i];
    if (n <= size - 8) offset = 8 + size_t(n);
  }
  std::string h;
  try {
    h = sha256_hex(fd, offset, path);
  } catch (...) {
    close(fd);
    throw;
  }
  close(fd);
  return h.substr(0, 12);
}

LoraLibrary::LoraLibrary(std::string dir, DitConfig dit) : dir_(std::move(dir)), dit_(std::move(dit)) {
  if (dir_.empty()) return;
  std::error_code ec;
  ERNIE_CHECK(fs::is_directory(dir_, ec), "--lora-dir ", dir_, ": not a folder");
}

std::vector<LoraLibrary::Available> LoraLibrary::available() const {
  std::vector<Available> v;
  if (dir_.empty()) return v;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec)) {
    const std::string f = e.path().filename().string();
    if (f.size() <= std::string(kExt).size() || f.compare(f.size() - 12, 12, kExt) != 0 || !e.is_regular_file(ec)) continue;
    v.push_back({f.substr(0, f.size() - 12), uint64_t(e.file_size(ec))});
  }
  std::sort(v.begin(), v.end(), [](const Available& a, const Available& b) { return a.name < b.name; });
  return v;
}

std::string LoraLibrary::find(const std::string& name) const {
  ERNIE_CHECK(!dir_.empty(), "LoRA '", name, "': LoRAs by name need a LoRA folder (--lora-dir)");
  ERNIE_CHECK(!name.empty() && name.size() <= 255 && name.find_first_of(std::string("/\\\0", 3)) == std::string::npos &&
                  name != "." && name != "..",
              "LoRA '", name, "': a name is a file in the LoRA folder, without a path");
  for (const std::string& f : {name + kExt, name}) {
    std::error_code ec;
    const fs::path p = fs::path(dir_) / f;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  std::string list;
  const std::vector<Available> all = available();
  for (size_t i = 0; i < all.size() && i < 20; ++i) list += (i ? ", " : "") + all[i].name;
  if (all.size() > 20) list += ", and " + std::to_string(all.size() - 20) + " more";
  fail("LoRA '", name, "' is not in ", dir_, all.empty() ? " (it holds no .safetensors files)" : " (available: " + list + ")");
}

const LoraLibrary::Cached& LoraLibrary::load(const std::string& path) const {
  struct stat st {};
  ERNIE_CHECK(::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode), "LoRA ", path, ": not a readable file");
  const int64_t mtime = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  auto it = cache_.find(path);
  if (it == cache_.end() || it->second.bytes != uint64_t(st.st_size) || it->second.mtime != mtime) {
    Cached c;
    c.bytes = uint64_t(st.st_size);
    c.mtime = mtime;
    c.adapter = std::make_shared<const LoraAdapter>(load_lora(path, dit_));
    c.hash = lora_short_hash(path);
    if (it == cache_.end() && cache_.size() >= kMaxCached)
      cache_.erase(std::min_element(cache_.begin(), cache_.end(),
                                    [](const auto& a, const auto& b) { return a.second.used < b.second.used; }));
    it = cache_.insert_or_assign(path, std::move(c)).first;
  }
  it->second.used = ++clock_;
  return it->second;
}

std::vector<LoraRef> LoraLibrary::resolve(const std::vector<LoraRef>& refs, const std::string& prompt) const {
  std::vector<LoraRef> all;
  for (const LoraRef& r : refs)
    if (!r.from_tag) all.push_back(r);
  strip_lora_tags(prompt, &all);
  std::lock_guard<std::mutex> lock(mu_);
  for (LoraRef& r : all) {
    const std::string what = r.path.empty() ? "LoRA '" + r.name + "'" : "LoRA " + r.path;
    check_lora_scale(r.scale, what);
    if (r.path.empty()) r.path = find(r.name);
    std::error_code ec;
    const fs::path canon = fs::canonical(r.path, ec);
    ERNIE_CHECK(!ec, what, ": ", ec.message());
    r.path = canon.string();
    if (r.name.empty()) r.name = canon.stem().string();
    const Cached& c = load(r.path);
    r.hash = c.hash;
    r.skipped = int(c.adapter->skipped.size());
  }
  // Each adapter's scales add up (stacked tags of one LoRA): the sum, the scale it is merged at, stays in range.
  std::map<std::string, float> sums;
  for (const LoraRef& r : all) sums[r.path] += r.scale;
  for (const auto& [path, sum] : sums)
    check_lora_scale(sum, "LoRA " + fs::path(path).stem().string() + " (its tags and flags added up)");
  return all;
}

LoraSet LoraLibrary::set(const std::vector<LoraRef>& resolved) const {
  std::lock_guard<std::mutex> lock(mu_);
  LoraSet s;
  for (const LoraRef& r : resolved)
    if (r.scale != 0) s.push_back({load(r.path).adapter, r.scale});
  return s;
}

}  // namespace ernie
