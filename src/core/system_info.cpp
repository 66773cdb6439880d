#include "core/system_info.h"

#include <dlfcn.h>
#include <omp.h>

#include <cstdlib>

#ifdef ERNIE_HAVE_CUDA
#include <cublasLt.h>
#include <cuda_runtime.h>
#ifdef ERNIE_HAVE_CUDNN
#include <cudnn.h>
#endif
#endif

namespace ernie {

namespace {
#ifdef ERNIE_HAVE_CUDA
std::string dotted(int v, int major_div, int minor_div, int minor_mod) {
  return std::to_string(v / major_div) + "." + std::to_string(v / minor_div % minor_mod);
}
#endif

// Libraries we do not link (NCCL, NVML) are asked through dlopen so the build needs no header for them.
std::string nccl_version() {
  void* h = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_LOCAL);
  if (!h) return "";
  using Fn = int (*)(int*);
  auto fn = reinterpret_cast<Fn>(dlsym(h, "ncclGetVersion"));
  int v = 0;
  std::string s;
  if (fn && fn(&v) == 0) s = std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
  dlclose(h);
  return s;
}

std::string nvml_driver_version() {
  void* h = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!h) return "";
  using Init = int (*)();
  using Get = int (*)(char*, unsigned);
  auto init = reinterpret_cast<Init>(dlsym(h, "nvmlInit_v2"));
  auto get = reinterpret_cast<Get>(dlsym(h, "nvmlSystemGetDriverVersion"));
  auto shutdown = reinterpret_cast<Init>(dlsym(h, "nvmlShutdown"));
  std::string s;
  char buf[96] = {};
  if (init && get && init() == 0) {
    if (get(buf, sizeof buf) == 0) s = buf;
    if (shutdown) shutdown();
  }
  dlclose(h);
  return s;
}
}  // namespace

SystemInfo query_system_info() {
  SystemInfo si;
  si.version = ERNIE_VERSION;
  si.omp_threads = omp_get_max_threads();
  for (const char* k : {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
                        "OMP_NUM_THREADS", "ERNIE_CACHE_DIR"})
    if (const char* v = std::getenv(k)) si.env.push_back({k, v});
  si.nccl = nccl_version();
  si.driver_version = nvml_driver_version();
#ifdef ERNIE_HAVE_CUDA
  si.cuda_built = true;
  int v = 0;
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) si.cuda_runtime = dotted(v, 1000, 10, 100);
  if (cudaDriverGetVersion(&v) == cudaSuccess && v > 0) si.cuda_driver = dotted(v, 1000, 10, 100);
  size_t lt = cublasLtGetVersion();
  si.cublas = std::to_string(lt / 10000) + "." + std::to_string(lt / 100 % 100) + "." + std::to_string(lt % 100);
#ifdef ERNIE_HAVE_CUDNN
  size_t dn = cudnnGetVersion();
  si.cudnn = std::to_string(dn / 10000) + "." + std::to_string(dn / 100 % 100) + "." + std::to_string(dn % 100);
#endif
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    si.gpu_error = cudaGetErrorString(e);
    cudaGetLastError();
  } else if (n == 0) {
    si.gpu_error = "no CUDA device visible";
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    GpuInfo g;
    g.index = i;
    g.name = p.name;
    g.cc_major = p.major;
    g.cc_minor = p.minor;
    g.total_bytes = p.totalGlobalMem;
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, i) == cudaSuccess) g.pci_bus_id = bus;
    size_t fr = 0, tot = 0;
    if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&fr, &tot) == cudaSuccess) g.free_bytes = fr;
    si.gpus.push_back(g);
  }
#else
  si.gpu_error = "built without CUDA (-DERNIE_CUDA=OFF or no nvcc)";
#endif
  return si;
}

}  // namespace ernie
