#include "ops/tuning_cache.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/file.h"
#include "core/json.h"

namespace ernie::tuning {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// File name of an identity: its letters and digits, other runs of characters as one '-'.
std::string file_name(const std::string& identity) {
  std::string s = "tuning-";
  for (char c : identity) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.';
    if (keep) s += c;
    else if (s.back() != '-') s += '-';
  }
  return s + ".json";
}

std::optional<json> read_json(const fs::path& p) {
  std::string text;
  try {
    text = read_regular_file(p.string(), kMaxJsonFileBytes);
  } catch (const Error&) {
    return std::nullopt;  // no cache yet, or not a file: measured again
  }
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

}  // namespace

std::string cache_dir() {
  if (std::string d = env("ERNIE_CACHE_DIR"); !d.empty()) return d;
  if (std::string d = env("XDG_CACHE_HOME"); !d.empty()) return (fs::path(d) / "ernie-image").string();
  if (std::string d = env("HOME"); !d.empty()) return (fs::path(d) / ".cache" / "ernie-image").string();
  return "";
}

bool enabled() { return env("ERNIE_TUNE") != "0"; }

Cache& Cache::of(const std::string& identity) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Cache>> caches;
  std::lock_guard<std::mutex> lk(mu);
  auto& c = caches[identity];
  if (!c) c = std::make_unique<Cache>(identity, enabled() ? cache_dir() : std::string());
  return *c;
}

Cache::Cache(std::string identity, const std::string& dir) : identity_(std::move(identity)) {
  if (dir.empty()) return;
  path_ = (fs::path(dir) / file_name(identity_)).string();
  if (auto j = read_json(path_); j && j->value("identity", "") == identity_ && j->contains("entries") &&
                                 (*j)["entries"].is_object())
    entries_ = (*j)["entries"];
}

std::optional<json> Cache::find(const std::string& key) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return *it;
}

void Cache::store(const std::string& key, json value) {
  std::lock_guard<std::mutex> lk(mu_);
  entries_[key] = std::move(value);
  if (path_.empty()) return;
  std::error_code ec;
  fs::create_directories(fs::path(path_).parent_path(), ec);
  try {
    write_file_atomic(path_, json{{"identity", identity_}, {"entries", entries_}}.dump(1) + "\n");
  } catch (const Error&) {
    if (!warned_) std::fprintf(stderr, "warning: cannot write the tuning cache %s; tuning is redone next run\n", path_.c_str());
    warned_ = true;
  }
}

json report() {
  json r = {{"dir", cache_dir()}, {"enabled", enabled()}, {"files", json::array()}};
  std::error_code ec;
  if (r["dir"] == "" || !fs::is_directory(cache_dir(), ec)) return r;
  for (const auto& e : fs::directory_iterator(cache_dir(), ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("tuning-", 0) != 0 || e.path().extension() != ".json") continue;
    json f = {{"file", e.path().string()}, {"bytes", e.file_size(ec)}};
    if (auto j = read_json(e.path()); j && j->contains("entries") && (*j)["entries"].is_object()) {
      f["identity"] = j->value("identity", "");
      f["entries"] = (*j)["entries"].size();
    } else {
      f["error"] = "not a tuning cache (unreadable JSON); it will be replaced";
    }
    r["files"].push_back(f);
  }
  return r;
}

}  // namespace ernie::tuning
