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
#include "core/gpu_topology.h"

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
constexpr int kP2pNvlink = 2;                // nvmlGpuP2PCapsIndex_t NVML_P2P_CAPS_INDEX_NVLINK
constexpr unsigned kMaxNvlinks = 18;         // NVML_NVLINK_MAX_LINKS (Hopper)

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

  Dev handle(const std::string& pci_bus_id) const {
    Dev d = nullptr;
    auto by_bus = sym<Ret (*)(const char*, Dev*)>("nvmlDeviceGetHandleByPciBusId_v2");
    return by_bus && by_bus(pci_bus_id.c_str(), &d) == 0 ? d : nullptr;
  }

  // Active NVLinks of a GPU (to a peer or an NVSwitch); -1 when NVML cannot say.
  int active_nvlinks(Dev d) const {
    auto state = sym<Ret (*)(Dev, unsigned, int*)>("nvmlDeviceGetNvLinkState");
    if (!state) return -1;
    int n = 0;
    for (unsigned link = 0; link < kMaxNvlinks; ++link) {
      int active = 0;  // nvmlEnableState_t
      if (state(d, link, &active) == 0 && active) ++n;
    }
    return n;
  }

  void read_pair(Dev a, Dev b, GpuPairReading& p) const {
    auto ancestor = sym<Ret (*)(Dev, Dev, int*)>("nvmlDeviceGetTopologyCommonAncestor");
    int level = 0;  // nvmlGpuTopologyLevel_t
    if (ancestor && ancestor(a, b, &level) == 0) p.ancestor = level;
    auto p2p = sym<Ret (*)(Dev, Dev, int, int*)>("nvmlDeviceGetP2PStatus");
    int status = 0;  // nvmlGpuP2PStatus_t: 0 = NVML_P2P_STATUS_OK
    if (p2p && p2p(a, b, kP2pNvlink, &status) == 0) p.nvlink = status == 0 ? 1 : 0;
    p.nvlinks_a = active_nvlinks(a);
    p.nvlinks_b = active_nvlinks(b);
  }

  void read(GpuReadings& g) const {
    Dev d = handle(g.pci_bus_id);
    if (!d) return;
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

std::string read_nvml_topology(const std::vector<GpuReadings>& gpus, std::vector<GpuPairReading>& pairs) {
  Nvml nvml;
  if (!nvml.error().empty()) return nvml.error();
  for (GpuPairReading& p : pairs) {
    const GpuReadings *a = nullptr, *b = nullptr;
    for (const GpuReadings& g : gpus) {
      if (g.cuda_index == p.a) a = &g;
      if (g.cuda_index == p.b) b = &g;
    }
    Dev da = a ? nvml.handle(a->pci_bus_id) : nullptr, db = b ? nvml.handle(b->pci_bus_id) : nullptr;
    if (da && db) nvml.read_pair(da, db, p);
  }
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
