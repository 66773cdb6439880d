// The DiT's stored weights kept in page-locked host memory, so that loading the DiT again (a server switching
// to another LoRA set, which starts from the exact base weights) uploads them at the bus's speed instead of
// paging the mapped file in through the driver's staging copy. Each tensor is copied in the first time a load
// reads it. It costs host memory equal to the stored DiT (the bf16 release: 15 GiB; on the H200's host the first
// load takes 8-12 s longer for the copy) and nothing on the device. Past `budget` bytes, or when the host
// refuses more page-locked memory, tensors are read from `stored` every time (slower switches, nothing lost).
#pragma once
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "ops/ops.h"

namespace ernie {

class HostWeightCache {
 public:
  using Source = std::function<ops::Weight(const std::string& name)>;
  HostWeightCache(Device device, size_t budget) : device_(device), budget_(budget) {}
  // stored(name) the first time (copied into pinned memory on a CUDA device; kept as is on the CPU, where
  // the mapped file is already host memory), the copy after that.
  ops::Weight get(const std::string& name, const Source& stored);
  size_t bytes() const;  // pinned bytes held
  // Half the host memory available now (/proc/meminfo's MemAvailable; 0 where unknown): the engine's budget.
  static size_t default_budget();

 private:
  Tensor pin(const Tensor& t) const;
  Device device_;
  size_t budget_, bytes_ = 0;
  bool full_ = false;  // the budget or the host's page-locked memory ran out: no more copies
  mutable std::mutex mu_;
  std::map<std::string, ops::Weight> cache_;
};

}  // namespace ernie
