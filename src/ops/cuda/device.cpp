// The CUDA device layer: one stream per device, a caching allocator (free lists by size class), the
// DeviceMemoryOps hooks Tensor uses (installed at start-up), and the backend's shared input checks.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <vector>

#include "ops/cuda/common.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/shape_rules.h"

namespace ernie::cuda {

void throw_cuda_error(const char* call, cudaError_t e, const char* file, int line) {
  std::string msg = std::string("CUDA error in ") + call + ": " + cudaGetErrorName(e) + " (" +
                    cudaGetErrorString(e) + ") at " + file + ":" + std::to_string(line);
  if (e == cudaErrorMemoryAllocation) throw OutOfMemory(msg);
  throw Error(msg);
}

namespace {

constexpr int kMaxDevices = 16;
bool g_poison = false;  // tests: fill every allocation with NaN bytes so unwritten outputs show
constexpr size_t kMinBlock = 512;

std::string gib(size_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f GiB", double(bytes) / double(1ull << 30));
  return b;
}

// Size classes: multiples of 512 B below 64 KiB, then four classes per power of two (waste < 25%).
size_t size_class(size_t n) {
  if (n <= kMinBlock) return kMinBlock;
  if (n <= (64u << 10)) return (n + kMinBlock - 1) / kMinBlock * kMinBlock;
  int e = 63 - __builtin_clzll(n - 1);  // 2^e < n <= 2^(e+1)
  size_t step = size_t(1) << (e - 2);
  return (n + step - 1) / step * step;
}

struct DeviceState {
  std::mutex mu;
  bool init = false;
  cudaStream_t stream = nullptr;
  int cc = 0;  // compute capability, major * 10 + minor
  int sms = 0;  // streaming multiprocessors
  std::map<size_t, std::vector<void*>> free_blocks;  // size class -> cached blocks
  std::map<void*, size_t> live;                      // block -> size class
  MemoryStats stats;
  size_t limit = 0;  // cap on reserved bytes (--max-vram); 0 = none
};

DeviceState& state(int device) {
  static DeviceState states[kMaxDevices];
  ERNIE_CHECK(device >= 0 && device < kMaxDevices, "CUDA device index ", std::to_string(device), " out of range");
  return states[device];
}

void ensure_init(int device, DeviceState& s) {
  if (s.init) return;
  int n = 0;
  ERNIE_CUDA_CHECK(cudaGetDeviceCount(&n));
  ERNIE_CHECK(device < n, "CUDA device cuda:", std::to_string(device), " does not exist (", std::to_string(n),
              " visible)");
  ERNIE_CUDA_CHECK(cudaSetDevice(device));
  ERNIE_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  int major = 0, minor = 0;
  ERNIE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  ERNIE_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  s.cc = major * 10 + minor;
  ERNIE_CUDA_CHECK(cudaDeviceGetAttribute(&s.sms, cudaDevAttrMultiProcessorCount, device));
  if (const std::string why = unusable_reason(device); !why.empty()) throw Error(why);
  s.init = true;
}

void release_cache(DeviceState& s) {
  for (auto& [cls, v] : s.free_blocks)
    for (void* p : v) {
      cudaFree(p);
      s.stats.reserved_bytes -= cls;
    }
  s.free_blocks.clear();
}

void* dev_alloc(size_t bytes, int device) {
  DeviceState& s = state(device);
  std::lock_guard<std::mutex> lk(s.mu);
  ensure_init(device, s);
  ERNIE_CUDA_CHECK(cudaSetDevice(device));
  size_t cls = size_class(std::max<size_t>(bytes, 1));
  void* p = nullptr;
  // Best fit among cached blocks up to twice the size class, before asking the driver for more.
  for (auto it = s.free_blocks.lower_bound(cls); it != s.free_blocks.end() && it->first < 2 * cls; ++it)
    if (!it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      cls = it->first;
      break;
    }
  if (!p && s.limit && s.stats.reserved_bytes + cls > s.limit) {  // over --max-vram: give the cache back first
    ERNIE_CUDA_CHECK(cudaStreamSynchronize(s.stream));
    release_cache(s);
    if (s.stats.reserved_bytes + cls > s.limit)
      throw OutOfMemory("over the memory limit on cuda:" + std::to_string(device) + " (--max-vram " + gib(s.limit) +
                        "): asked for " + gib(bytes) + " with " + gib(s.stats.in_use_bytes) +
                        " in tensors; try a smaller image size or batch, or a larger --max-vram");
  }
  if (!p) {
    cudaError_t e = cudaMalloc(&p, cls);
    if (e == cudaErrorMemoryAllocation) {  // give the cache back and try once more
      cudaGetLastError();
      ERNIE_CUDA_CHECK(cudaStreamSynchronize(s.stream));
      release_cache(s);
      e = cudaMalloc(&p, cls);
    }
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      throw OutOfMemory("out of GPU memory on cuda:" + std::to_string(device) + ": asked for " + gib(bytes) +
                        ", " + gib(free_b) + " free of " + gib(total_b) + " (this process holds " +
                        gib(s.stats.in_use_bytes) + " in tensors); try a smaller image size or batch");
    }
    ERNIE_CUDA_CHECK(e);
    s.stats.reserved_bytes += cls;
    s.stats.peak_reserved_bytes = std::max(s.stats.peak_reserved_bytes, s.stats.reserved_bytes);
  }
  if (g_poison) ERNIE_CUDA_CHECK(cudaMemsetAsync(p, 0xff, cls, s.stream));
  s.live[p] = cls;
  s.stats.in_use_bytes += cls;
  s.stats.peak_in_use_bytes = std::max(s.stats.peak_in_use_bytes, s.stats.in_use_bytes);
  return p;
}

// Freed blocks go back to the free list: all work runs in order on the device's one stream, so a later
// allocation reusing the block is ordered after every kernel that used it. Never throws.
void dev_free(void* p, int device) {
  DeviceState& s = state(device);
  std::lock_guard<std::mutex> lk(s.mu);
  auto it = s.live.find(p);
  if (it == s.live.end()) return;
  s.stats.in_use_bytes -= it->second;
  s.free_blocks[it->second].push_back(p);
  s.live.erase(it);
}

void dev_copy(void* dst, Device dd, const void* src, Device sd, size_t bytes) {
  if (bytes == 0) return;
  const int device = dd.is_cuda() ? dd.index : sd.index;
  cudaStream_t st = stream(device);
  ERNIE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, st));
  // Device -> host: the caller reads the result next. Host -> device from pageable memory returns once the
  // source is staged, so the host buffer may go right away and the device need not drain (no bubble).
  if (dd.is_cpu()) ERNIE_CUDA_CHECK(cudaStreamSynchronize(st));
}

void dev_zero(void* p, size_t bytes, int device) {
  if (bytes) ERNIE_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream(device)));
}

const bool g_installed = [] {
  DeviceMemoryOps ops;
  ops.alloc = dev_alloc;
  ops.free = dev_free;
  ops.copy = dev_copy;
  ops.zero = dev_zero;
  set_device_memory_ops(ops);
  return true;
}();

}  // namespace

std::string unusable_reason(int device) {
  int major = 0, minor = 0;
  ERNIE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  ERNIE_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  const std::string at = "cuda:" + std::to_string(device) + " (" + device_name(device) + ")";
  if (major * 10 + minor < kMinComputeCapability)
    return at + " has compute capability " + std::to_string(major) + "." + std::to_string(minor) +
           "; the CUDA backend needs compute capability 8.0 (Ampere) or newer for bf16 tensor cores: use --device cpu";
  if (const CodeArch& a = code_arch(device); !a.error.empty()) return at + ": " + a.error;
  return "";
}

int compute_capability(int device) {
  DeviceState& s = state(device);
  if (!s.init) {
    std::lock_guard<std::mutex> lk(s.mu);
    ensure_init(device, s);
  }
  return s.cc;
}

int sm_count(int device) {
  DeviceState& s = state(device);
  if (!s.init) {
    std::lock_guard<std::mutex> lk(s.mu);
    ensure_init(device, s);
  }
  return s.sms;
}

cudaStream_t stream(int device) {
  DeviceState& s = state(device);
  if (!s.init) {
    std::lock_guard<std::mutex> lk(s.mu);
    ensure_init(device, s);
  }
  int cur = -1;
  ERNIE_CUDA_CHECK(cudaGetDevice(&cur));
  if (cur != device) ERNIE_CUDA_CHECK(cudaSetDevice(device));
  return s.stream;
}

MemoryStats memory_stats(int device) {
  DeviceState& s = state(device);
  std::lock_guard<std::mutex> lk(s.mu);
  return s.stats;
}

void reset_peak_memory(int device) {
  DeviceState& s = state(device);
  std::lock_guard<std::mutex> lk(s.mu);
  s.stats.peak_in_use_bytes = s.stats.in_use_bytes;
  s.stats.peak_reserved_bytes = s.stats.reserved_bytes;
}

void empty_cache(int device) {
  DeviceState& s = state(device);
  std::lock_guard<std::mutex> lk(s.mu);
  if (!s.init) return;
  ERNIE_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  release_cache(s);
}

void set_memory_limit(int device, size_t bytes) {
  DeviceState& s = state(device);
  std::lock_guard<std::mutex> lk(s.mu);
  s.limit = bytes;
}

size_t available_bytes(int device) {
  DeviceState& s = state(device);
  std::lock_guard<std::mutex> lk(s.mu);
  ensure_init(device, s);
  ERNIE_CUDA_CHECK(cudaSetDevice(device));
  size_t free_b = 0, total_b = 0;
  ERNIE_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const size_t cached = s.stats.reserved_bytes - s.stats.in_use_bytes;
  size_t avail = free_b + cached;
  if (s.limit) avail = std::min(avail, s.limit > s.stats.in_use_bytes ? s.limit - s.stats.in_use_bytes : size_t(0));
  return avail;
}

void set_poison_allocations(bool on) { g_poison = on; }

void synchronize(int device) { ERNIE_CUDA_CHECK(cudaStreamSynchronize(stream(device))); }

int can_access_peer(int from, int to) {
  int v = 0;
  if (cudaDeviceCanAccessPeer(&v, from, to) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return v;
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string device_name(int device) {
  cudaDeviceProp p{};
  ERNIE_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  return p.name;
}

// ---- shared checks ----------------------------------------------------------------------------------------

ElemType elem_type(DType t, const char* op) {
  switch (t) {
    case DType::F32: return kF32;
    case DType::BF16: return kBF16;
    case DType::F16: return kF16;
    default: fail(op, ": unsupported dtype ", dtype_name(t), " (F32, BF16 or F16)");
  }
}

VecF vec(const Tensor& t) {
  VecF v;
  if (!t.defined()) return v;
  v.p = t.raw();
  v.type = elem_type(t.dtype(), "vector");
  return v;
}

namespace detail {

void check_act(const Tensor& x, const char* op, const char* what) {
  ERNIE_CHECK(x.defined(), op, ": ", what, " is undefined");
  ERNIE_CHECK(x.device().is_cuda(), op, ": ", what, " is on ", x.device().str(), ", expected a CUDA device");
  ERNIE_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::BF16, op, ": ", what, " ", shape_str(x.shape()),
              " has dtype ", dtype_name(x.dtype()), "; CUDA activations are F32 or BF16");
}

void check_same_device(const Tensor& x, const Tensor& t, const char* op, const char* what) {
  ERNIE_CHECK(t.defined(), op, ": ", what, " is undefined");
  ERNIE_CHECK(t.device() == x.device(), op, ": ", what, " is on ", t.device().str(), " but the input is on ",
              x.device().str());
}

void check_float(const Tensor& t, const char* op, const char* what) {
  ERNIE_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::BF16 || t.dtype() == DType::F16, op, ": ", what, " ",
              shape_str(t.shape()), " has dtype ", dtype_name(t.dtype()), " (expected F32, BF16 or F16)");
}

int64_t row_vector_stride(const Tensor& x, const Tensor& v, const char* op, const char* what) {
  check_same_device(x, v, op, what);
  check_float(v, op, what);
  return ops::rules::row_vector_stride(x, v, op, what);
}

std::string shapes(const Tensor& a, const Tensor& b) { return shape_str(a.shape()) + " and " + shape_str(b.shape()); }

}  // namespace detail
}  // namespace ernie::cuda

// Referenced by the link line (-u) so this object, and with it the memory hooks, is always linked.
extern "C" {
int ernie_cuda_backend_anchor = 1;
}
