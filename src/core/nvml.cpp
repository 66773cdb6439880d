// Readings for the hardware checklist (core/gpu_health.h): NVML, the driver's library, opened with dlopen so
// that nothing links it and a machine without it still runs doctor (which then says so), and /dev/nvidia*.
// The few NVML types used are declared here as the driver's nvml.h defines them.
#include <dirent.h>
#include <dlfcn.h>
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/gpu_health.h"

namespace ernie {

namespace {

using Ret = int;  // nvmlReturn_t; 0 = NVML_SUCCESS
using Dev = void*;
struct Memory {  // nvmlMemory_t
  unsigned long long total, free, used;
};
struct Bar1 {  // nvmlBAR1Memory_t
  unsigned long long total, free, used;
};
struct Utilization {  // nvmlUtilization_t
  unsigned gpu, memory;
};
constexpr int kClockSm = 1, kClockMem = 2;  // nvmlClockType_t

class Nvml {
 public:
  Nvml() {
    h_ = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!h_) {
      error_ = "NVML (libnvidia-ml.so.1) not found: no hardware checks";
      return;
    }
    auto init = sym<Ret (*)()>("nvmlInit_v2");
    const Ret r = init ? init() : -1;
    if (r != 0) error_ = "NVML did not start (" + describe(r) + "): no hardware checks";
    started_ = r == 0;
  }
  ~Nvml() {
    if (started_)
      if (auto shutdown = sym<Ret (*)()>("nvmlShutdown")) shutdown();
    if (h_) dlclose(h_);
  }
  const std::string& error() const { return error_; }

  template <class F>
  F sym(const char* name) const {
    return h_ ? reinterpret_cast<F>(dlsym(h_, name)) : nullptr;
  }
  std::string describe(Ret r) const {
    auto str = sym<const char* (*)(Ret)>("nvmlErrorString");
    return str ? str(r) : "error " + std::to_string(r);
  }
  // fn(dev, out...) where the symbol exists and succeeds.
  template <class... Out>
  bool get(const char* name, Dev d, Out*... out) const {
    auto fn = sym<Ret (*)(Dev, Out*...)>(name);
    return fn && fn(d, out...) == 0;
  }

  void read(GpuReadings& g) const {
    Dev d = nullptr;
    auto by_bus = sym<Ret (*)(const char*, Dev*)>("nvmlDeviceGetHandleByPciBusId_v2");
    if (!by_bus || by_bus(g.pci_bus_id.c_str(), &d) != 0) return;
    unsigned u = 0, v = 0;
    auto as_int = [](unsigned x) { return int(std::min<unsigned>(x, 1u << 30)); };
    if (get("nvmlDeviceGetCurrPcieLinkGeneration", d, &u)) g.pcie_gen = as_int(u);
    if (get("nvmlDeviceGetMaxPcieLinkGeneration", d, &u)) g.pcie_gen_max = as_int(u);
    if (get("nvmlDeviceGetGpuMaxPcieLinkGeneration", d, &u)) g.pcie_gen_gpu_max = as_int(u);
    if (get("nvmlDeviceGetCurrPcieLinkWidth", d, &u)) g.pcie_width = as_int(u);
    if (get("nvmlDeviceGetMaxPcieLinkWidth", d, &u)) g.pcie_width_max = as_int(u);
    Memory m{};
    if (get("nvmlDeviceGetMemoryInfo", d, &m)) g.memory_bytes = m.total;
    Bar1 b{};
    if (get("nvmlDeviceGetBAR1MemoryInfo", d, &b)) g.bar1_bytes = b.total;
    auto clock = [&](const char* name, int type, int& out) {
      auto fn = sym<Ret (*)(Dev, int, unsigned*)>(name);
      unsigned mhz = 0;
      if (fn && fn(d, type, &mhz) == 0) out = as_int(mhz);
    };
    clock("nvmlDeviceGetClockInfo", kClockSm, g.sm_mhz);
    clock("nvmlDeviceGetMaxClockInfo", kClockSm, g.sm_max_mhz);
    clock("nvmlDeviceGetClockInfo", kClockMem, g.mem_mhz);
    clock("nvmlDeviceGetMaxClockInfo", kClockMem, g.mem_max_mhz);
    unsigned long long reasons = 0;
    if (get("nvmlDeviceGetCurrentClocksEventReasons", d, &reasons) ||
        get("nvmlDeviceGetCurrentClocksThrottleReasons", d, &reasons))
      g.clock_reasons = int64_t(reasons & 0xffffffffull);
    Utilization ut{};
    if (get("nvmlDeviceGetUtilizationRates", d, &ut)) g.utilization = as_int(ut.gpu);
    if (get("nvmlDeviceGetPowerManagementLimit", d, &u)) g.power_limit_w = as_int(u / 1000);
    if (get("nvmlDeviceGetPowerManagementDefaultLimit", d, &u)) g.power_default_w = as_int(u / 1000);
    int state = 0, pending = 0;  // nvmlEnableState_t
    if (get("nvmlDeviceGetPersistenceMode", d, &state)) g.persistence = state;
    if (get("nvmlDeviceGetEccMode", d, &state, &pending)) g.ecc = state, g.ecc_pending = pending;
    if (get("nvmlDeviceGetMigMode", d, &u, &v)) g.mig = as_int(u), g.mig_pending = as_int(v);
  }

 private:
  void* h_ = nullptr;
  bool started_ = false;
  std::string error_;
};

}  // namespace

std::string read_nvml(std::vector<GpuReadings>& gpus) {
  Nvml nvml;
  if (!nvml.error().empty()) return nvml.error();
  for (GpuReadings& g : gpus) nvml.read(g);
  return "";
}

std::vector<DeviceNode> read_device_nodes() {
  std::vector<DeviceNode> nodes;
  DIR* dir = opendir("/dev");
  if (!dir) return nodes;
  while (const dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    if (name.rfind("nvidia", 0) != 0 || name.find("-caps") != std::string::npos) continue;
    const bool numbered = name.size() > 6 && std::all_of(name.begin() + 6, name.end(), ::isdigit);
    if (!numbered && name != "nvidiactl" && name != "nvidia-uvm") continue;
    DeviceNode n;
    n.path = "/dev/" + name;
    struct stat st {};
    if (stat(n.path.c_str(), &st) != 0) continue;
    n.mode = st.st_mode;
    if (const group* gr = getgrgid(st.st_gid)) n.group = gr->gr_name;
    else n.group = std::to_string(st.st_gid);
    n.rw = access(n.path.c_str(), R_OK | W_OK) == 0;
    nodes.push_back(n);
  }
  closedir(dir);
  std::sort(nodes.begin(), nodes.end(), [](const DeviceNode& a, const DeviceNode& b) { return a.path < b.path; });
  return nodes;
}

}  // namespace ernie
