#include "generate_util.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <algorithm>
#include <set>

#include <unistd.h>

#include "core/atomic_file.h"
#include "core/error.h"
#include "engine/image_files.h"
#include "io/safetensors.h"

namespace ernie::cli {
namespace fs = std::filesystem;

namespace {
// Formats one pattern for index i; `has_index` tells whether the pattern had a %d.
std::string format_index(const std::string& pat, int i, bool* has_index) {
  std::string out;
  *has_index = false;
  for (size_t k = 0; k < pat.size(); ++k) {
    if (pat[k] != '%') {
      out += pat[k];
      continue;
    }
    size_t j = k + 1;
    if (j < pat.size() && pat[j] == '%') {
      out += '%';
      k = j;
      continue;
    }
    bool zero = j < pat.size() && pat[j] == '0';
    if (zero) ++j;
    int width = 0;
    while (j < pat.size() && std::isdigit(static_cast<unsigned char>(pat[j])) && width < 100)
      width = width * 10 + (pat[j++] - '0');
    ERNIE_CHECK(j < pat.size() && pat[j] == 'd', "-o ", pat, ": only %d, %0Nd and %% are allowed in the file name");
    ERNIE_CHECK(width <= 12, "-o ", pat, ": index width ", std::to_string(width), " is too large");
    std::string num = std::to_string(i);
    if (int(num.size()) < width) num.insert(0, size_t(width) - num.size(), zero ? '0' : ' ');
    out += num;
    *has_index = true;
    k = j;
  }
  return out;
}
}  // namespace

std::vector<std::string> expand_output_paths(const std::string& pattern, int n) {
  ERNIE_CHECK(!pattern.empty(), "-o: empty output path");
  bool has_index = false;
  format_index(pattern, 0, &has_index);
  std::string pat = pattern;
  if (!has_index && n > 1) {
    fs::path p(pattern);
    std::string ext = p.extension().string(), stem = pattern.substr(0, pattern.size() - ext.size());
    pat.clear();
    for (char ch : stem) pat += ch == '%' ? std::string("%%") : std::string(1, ch);
    pat += "_%d" + ext;
  }
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (int i = 0; i < n; ++i) {
    bool dummy;
    std::string s = n == 1 && !has_index ? pattern : format_index(pat, i, &dummy);
    ERNIE_CHECK(seen.insert(s).second, "-o ", pattern, ": two images would be written to ", s);
    out.push_back(s);
  }
  return out;
}

void check_writable(const std::string& path, const std::vector<std::string>& exts,
                    const std::vector<std::string>& inputs) {
  fs::path p(path);
  std::string e = p.extension().string(), names;
  for (auto& ch : e) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  for (size_t i = 0; i < exts.size(); ++i) names += (i == 0 ? "" : i + 1 == exts.size() ? " or " : ", ") + exts[i];
  ERNIE_CHECK(std::find(exts.begin(), exts.end(), e) != exts.end(), path, ": output must be a ", names, " file");
  std::error_code ec;
  ERNIE_CHECK(!fs::is_directory(p, ec), path, ": is a folder");
  fs::path dir = p.parent_path();
  if (dir.empty()) dir = ".";
  ERNIE_CHECK(fs::is_directory(dir, ec), path, ": folder ", dir.string(), " does not exist");
  ERNIE_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0, path, ": folder ", dir.string(), " is not writable (",
              std::strerror(errno), ")");
  check_output_path(path, inputs);  // a device node, a FIFO; an input under another name
  if (fs::exists(p, ec))
    ERNIE_CHECK(::access(p.c_str(), W_OK) == 0, path, ": exists and is not writable (", std::strerror(errno), ")");
}

InitLatents load_init_latents(const std::string& path) {
  auto f = SafeTensorsFile::open(path);
  const TensorInfo* ti = f->find("latents");
  ERNIE_CHECK(ti != nullptr, path, ": no tensor named 'latents' (", std::to_string(f->tensors().size()),
              " tensors in the file)");
  ERNIE_CHECK(dtype_is_float(ti->dtype), path, ": tensor 'latents' has dtype ", dtype_name(ti->dtype),
              ", expected a float type");
  ERNIE_CHECK(ti->shape.size() == 4, path, ": tensor 'latents' has shape ", shape_str(ti->shape),
              ", expected [batch, channels, height/s, width/s]");
  InitLatents il;
  il.latents = f->tensor("latents").to_f32().clone();
  auto it = f->metadata().find("seed");
  if (it != f->metadata().end()) {
    try {
      size_t used = 0;
      unsigned long long v = std::stoull(it->second, &used);
      if (used == it->second.size()) il.seed = v;
    } catch (const std::exception&) {
    }
  }
  return il;
}

Image load_image_flag(const std::string& path, const char* flag) {
  try {
    return load_image(path);
  } catch (const Error& e) {
    throw Error(std::string(flag) + ": " + e.what());
  }
}

}  // namespace ernie::cli
