// What this build and this machine offer: versions of the GPU libraries and every visible GPU.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ernie {

struct GpuInfo {
  int index = 0;
  std::string name, pci_bus_id;  // "0000:19:00.0"
  int cc_major = 0, cc_minor = 0;
  uint64_t total_bytes = 0, free_bytes = 0;
};

struct SystemInfo {
  std::string version;       // engine version
  bool cuda_built = false;   // compiled with the CUDA backend
  std::string cuda_runtime;  // "13.0" or ""
  std::string cuda_driver;   // CUDA version the driver supports, "" without a driver
  std::string driver_version;  // NVIDIA driver ("580.82.07"), from NVML when present
  std::string cublas, cudnn, nccl;  // versions, "" when unavailable
  std::string gpu_error;     // why no GPU is listed, when none is
  std::vector<GpuInfo> gpus;
  std::vector<std::pair<std::string, std::string>> env;  // CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES, ...
  int omp_threads = 1;
};

SystemInfo query_system_info();

}  // namespace ernie
