// The hardware checklist doctor runs on every GPU (the BIOS, PCIe, clock, power and permission problems that
// cost the field report days): readings, taken through NVML (core/nvml.cpp) and from /dev, and the rules that
// turn them into findings, each naming its likely fix. The rules are pure functions of the readings, so tests
// feed them fake ones.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ernie {

// One GPU as NVML reports it; -1 (or 0 for sizes, "" for text) where NVML could not say.
struct GpuReadings {
  int cuda_index = -1;
  std::string name, pci_bus_id;
  int pcie_gen = -1, pcie_gen_max = -1, pcie_gen_gpu_max = -1;  // now, with this host, the GPU's own
  int pcie_width = -1, pcie_width_max = -1;
  uint64_t memory_bytes = 0, bar1_bytes = 0;
  int sm_mhz = -1, sm_max_mhz = -1, mem_mhz = -1, mem_max_mhz = -1;
  int64_t clock_reasons = -1;  // NVML's clocks-event (throttle) reason bits
  int utilization = -1;        // percent of the last sample period a kernel ran
  int power_limit_w = -1, power_default_w = -1;
  int persistence = -1, ecc = -1, ecc_pending = -1, mig = -1, mig_pending = -1;  // 0 off, 1 on
};

// A /dev/nvidia* node: whether this process may read and write it, and who may.
struct DeviceNode {
  std::string path, group;
  unsigned mode = 0;
  bool rw = false;
};

struct Finding {
  std::string level;  // "problem" (stops or cripples the GPU), "warning" (costs speed), "note"
  std::string check;  // "pcie", "bar1", "memory", "clocks", "power", "persistence", "ecc", "mig", "access", "driver"
  std::string message, fix;
};

std::vector<Finding> check_gpu(const GpuReadings& g);
// /dev/nvidia* access, and the driver's CUDA version (cuda_driver, "12.4") against the runtime's.
std::vector<Finding> check_host(const std::vector<DeviceNode>& nodes, const std::string& cuda_driver,
                                const std::string& cuda_runtime);
// The memory a GPU model is sold with, GiB-ish as vendors count it (96 for "RTX PRO 6000 Blackwell"), from
// the size in its name or a table of common cards; 0 when unknown.
double nominal_memory_gib(const std::string& name);
// The names of the clocks-event reason bits set in `reasons` ("power cap, thermal (hardware)").
std::string clock_reason_names(int64_t reasons);

// Readings: NVML for the GPUs at these PCI bus ids ("" on success, else why NVML gave nothing), and the
// /dev/nvidia* nodes present.
std::string read_nvml(std::vector<GpuReadings>& gpus);
std::vector<DeviceNode> read_device_nodes();

}  // namespace ernie
