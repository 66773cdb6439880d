// Device queries for the layers above ops/: each asks the CUDA backend when the build has one.
#include "core/error.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/ops.h"
#include "ops/peer_access.h"
#ifdef ERNIE_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace ernie::ops {

#ifdef ERNIE_HAVE_CUDA
int peer_access(int from, int to) { return cuda::can_access_peer(from, to); }
bool cuda_built() { return true; }
int cuda_device_count() { return cuda::device_count(); }
std::string device_name(Device d) { return d.is_cuda() ? cuda::device_name(d.index) : "cpu"; }
std::string unusable_reason(Device d) { return d.is_cuda() ? cuda::unusable_reason(d.index) : ""; }
std::vector<KernelPath> kernel_paths(Device d) { return d.is_cuda() ? cuda::kernel_paths(d.index) : std::vector<KernelPath>{}; }
void synchronize(Device d) {
  if (d.is_cuda()) cuda::synchronize(d.index);
}
MemoryStats memory_stats(Device d) {
  if (!d.is_cuda()) return {};
  const cuda::MemoryStats m = cuda::memory_stats(d.index);
  return {m.in_use_bytes, m.peak_in_use_bytes, m.reserved_bytes, m.peak_reserved_bytes};
}
void reset_peak_memory(Device d) {
  if (d.is_cuda()) cuda::reset_peak_memory(d.index);
}
size_t available_bytes(Device d) { return d.is_cuda() ? cuda::available_bytes(d.index) : 0; }
void release_cached_memory(Device d) {
  if (d.is_cuda()) cuda::empty_cache(d.index);
}
void set_memory_limit(Device d, size_t bytes) {
  if (d.is_cuda()) cuda::set_memory_limit(d.index, bytes);
}
#else
int peer_access(int, int) { return -1; }
bool cuda_built() { return false; }
int cuda_device_count() { return 0; }
std::string device_name(Device d) {
  ERNIE_CHECK(d.is_cpu(), "device ", d.str(), ": this build has no CUDA backend");
  return "cpu";
}
std::string unusable_reason(Device d) { return d.is_cuda() ? "this build has no CUDA backend" : ""; }
std::vector<KernelPath> kernel_paths(Device) { return {}; }
void synchronize(Device) {}
MemoryStats memory_stats(Device) { return {}; }
void reset_peak_memory(Device) {}
size_t available_bytes(Device) { return 0; }
void release_cached_memory(Device) {}
void set_memory_limit(Device, size_t) {}
#endif

void set_threads(int n) { cpu::set_threads(n); }

}  // namespace ernie::ops
