#include "models/host_weight_cache.h"

#include <cstring>
#include <memory>

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
  ops::Weight p;
  p.w = pin(w.w);
  p.scale = pin(w.scale);
  p.input_scale = pin(w.input_scale);
  return cache_.emplace(name, p).first->second;
}

size_t HostWeightCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [name, w] : cache_)
    if (device_.is_cuda()) n += w.nbytes();
  return n;
}

}  // namespace ernie
