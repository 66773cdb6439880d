#include "models/host_weight_cache.h"

#include <cstring>
#include <fstream>
#include <limits>
#include <memory>

#include "core/error.h"

namespace ernie {

Tensor HostWeightCache::pin(const Tensor& t) const {
  if (!t.defined() || !device_.is_cuda()) return t;
  const Tensor host = t.device().is_cpu() ? t : t.to(kCPU);
  auto buf = std::make_shared<Tensor>(ops::pinned_empty(host.nbytes(), device_));
  std::memcpy(buf->raw(), host.raw(), host.nbytes());
  return Tensor::borrow(buf->raw(), host.shape(), host.dtype(), buf, kCPU);
}

ops::Weight HostWeightCache::get(const std::string& name, const Source& stored) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cache_.find(name);
  if (it != cache_.end()) return it->second;
  ops::Weight w = stored(name);
  if (full_ || bytes_ + w.nbytes() > budget_) {
    full_ = true;
    return w;
  }
  ops::Weight p = w;  // GGML geometry kept
  try {
    p.w = pin(w.w);
    p.scale = pin(w.scale);
    p.input_scale = pin(w.input_scale);
  } catch (const OutOfMemory&) {
    full_ = true;
    return w;
  }
  if (device_.is_cuda()) bytes_ += p.nbytes();
  return cache_.emplace(name, p).first->second;
}

size_t HostWeightCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t HostWeightCache::default_budget() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  while (f >> key >> kib) {
    if (key == "MemAvailable:") return kib / 2 * 1024;
    f.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return 0;
}

}  // namespace ernie
