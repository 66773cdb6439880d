#include "core/gpu_health.h"

#include <cctype>
#include <cstdio>
#include <utility>

namespace ernie {

namespace {

// NVML's clocks-event reason bits (nvmlClocksEventReason*).
constexpr int64_t kIdle = 0x1, kAppClocks = 0x2, kPowerCap = 0x4, kHwSlowdown = 0x8, kSwThermal = 0x20,
                  kHwThermal = 0x40, kPowerBrake = 0x80;

std::string gib(uint64_t bytes) {
  char b[32];
  if (bytes < (uint64_t(1) << 30)) std::snprintf(b, sizeof b, "%.0f MiB", double(bytes) / double(1 << 20));
  else std::snprintf(b, sizeof b, "%.1f GiB", double(bytes) / double(uint64_t(1) << 30));
  return b;
}

bool busy(const GpuReadings& g) {
  if (g.clock_reasons >= 0 && (g.clock_reasons & kIdle)) return false;
  return g.utilization >= 50;
}

// "12.4" -> 12004; -1 when it is not a version.
int version(const std::string& v) {
  int major = 0, minor = 0;
  return std::sscanf(v.c_str(), "%d.%d", &major, &minor) == 2 ? major * 1000 + minor : -1;
}

// `key` in `name` as a whole word ("L4" is not in "L40S", "A10" not in "A100").
bool has_word(const std::string& name, const std::string& key) {
  for (size_t at = name.find(key); at != std::string::npos; at = name.find(key, at + 1)) {
    const size_t end = at + key.size();
    const bool left = at == 0 || !std::isalnum(static_cast<unsigned char>(name[at - 1]));
    const bool right = end == name.size() || !std::isalnum(static_cast<unsigned char>(name[end]));
    if (left && right) return true;
  }
  return false;
}

}  // namespace

double nominal_memory_gib(const std::string& name) {
  // A size in the name first: "A100-SXM4-80GB", "H100 80GB HBM3".
  for (size_t i = 0; i + 2 < name.size(); ++i)
    if (std::isdigit(static_cast<unsigned char>(name[i])) && (i == 0 || !std::isalnum(static_cast<unsigned char>(name[i - 1])))) {
      size_t j = i;
      while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
      if (name.compare(j, 2, "GB") == 0 && (j + 2 == name.size() || !std::isalnum(static_cast<unsigned char>(name[j + 2]))))
        return std::stod(name.substr(i, j - i));
    }
  static const std::pair<const char*, double> kCards[] = {
      {"H200", 141},         {"H100 NVL", 94},   {"H100", 80},     {"B200", 180},     {"A100", 40},
      {"L40S", 48},          {"L40", 48},        {"L4", 24},       {"A40", 48},       {"A30", 24},
      {"A10G", 24},          {"A10", 24},        {"RTX PRO 6000", 96}, {"RTX 6000 Ada", 48}, {"RTX A6000", 48},
      {"RTX 5090", 32},      {"RTX 5080", 16},   {"RTX 4090", 24}, {"RTX 4080", 16},  {"RTX 3090", 24},
      {"RTX 3080 Ti", 12},   {"RTX 3080", 10}};
  for (const auto& [key, g] : kCards)
    if (has_word(name, key)) return g;
  return 0;
}

std::string clock_reason_names(int64_t r) {
  static const std::pair<int64_t, const char*> kNames[] = {
      {kIdle, "idle"},          {kAppClocks, "application or locked clocks"}, {kPowerCap, "power cap"},
      {kHwSlowdown, "hardware slowdown"}, {0x10, "sync boost"}, {kSwThermal, "thermal (software)"},
      {kHwThermal, "thermal (hardware)"}, {kPowerBrake, "power brake"}, {0x100, "display clocks"}};
  std::string s;
  for (const auto& [bit, n] : kNames)
    if (r >= 0 && (r & bit)) s += (s.empty() ? "" : ", ") + std::string(n);
  return s.empty() ? "none" : s;
}

std::vector<Finding> check_gpu(const GpuReadings& g) {
  std::vector<Finding> f;
  auto add = [&](const char* level, const char* check, std::string msg, std::string fix) {
    f.push_back({level, check, std::move(msg), std::move(fix)});
  };
  const std::string idx = g.cuda_index >= 0 ? std::to_string(g.cuda_index) : std::string("N");
  // PCIe: lanes do not come back by themselves; the speed drops at idle by design.
  if (g.pcie_width > 0 && g.pcie_width_max > 0 && g.pcie_width < g.pcie_width_max)
    add("warning", "pcie", "PCIe link x" + std::to_string(g.pcie_width) + " of x" + std::to_string(g.pcie_width_max),
        "reseat the card, or move it to a slot wired for x" + std::to_string(g.pcie_width_max) +
            "; check the BIOS's slot bifurcation (x16, not x8x8) and any riser cable");
  if (g.pcie_gen > 0 && g.pcie_gen_max > 0 && g.pcie_gen < g.pcie_gen_max) {
    const std::string at = "PCIe link at Gen" + std::to_string(g.pcie_gen) + " of Gen" + std::to_string(g.pcie_gen_max);
    if (busy(g))
      add("warning", "pcie", at + " under load", "set the slot's PCIe speed to Auto (or Gen" +
                                                     std::to_string(g.pcie_gen_max) + ") in the BIOS; check risers and retimers");
    else
      add("note", "pcie", at + " while idle (GPUs lower the link speed when idle)",
          "to check the speed under load, run doctor again while `ernie-image bench` runs");
  }
  if (g.pcie_gen_gpu_max > 0 && g.pcie_gen_max > 0 && g.pcie_gen_max < g.pcie_gen_gpu_max)
    add("note", "pcie", "the host limits the link to Gen" + std::to_string(g.pcie_gen_max) + " (the GPU can Gen" +
                            std::to_string(g.pcie_gen_gpu_max) + ")",
        "an older slot or CPU, or a PCIe speed set in the BIOS");
  // A small BAR1 aperture: Resizable BAR / Above 4G decoding off.
  if (g.bar1_bytes > 0 && g.memory_bytes > 0 && g.bar1_bytes < g.memory_bytes / 2)
    add("warning", "bar1", "BAR1 aperture " + gib(g.bar1_bytes) + " for " + gib(g.memory_bytes) + " of memory",
        "enable Above 4G Decoding and Resizable BAR in the BIOS (boot in UEFI mode, CSM off)");
  // Memory the card should have.
  const double nominal = nominal_memory_gib(g.name);
  if (nominal > 0 && g.memory_bytes > 0 && g.mig != 1 && double(g.memory_bytes) < 0.88 * nominal * double(1u << 30)) {
    char b[160];
    std::snprintf(b, sizeof b, "shows %.1f GiB of memory; a %s has %.0f GB", double(g.memory_bytes) / double(1u << 30),
                  g.name.c_str(), nominal);
    add("problem", "memory", b,
        "check for a vGPU or MIG profile (nvidia-smi -q), enable Above 4G Decoding in the BIOS, and update the "
        "driver and VBIOS");
  }
  // Clocks and why they are held.
  if (g.clock_reasons >= 0) {
    if (g.clock_reasons & (kHwSlowdown | kHwThermal | kPowerBrake))
      add("problem", "clocks", "hardware slowdown active (" + clock_reason_names(g.clock_reasons) + ")",
          "check that every power connector is seated and the power supply is sufficient, and check cooling and "
          "airflow");
    else if (g.clock_reasons & kSwThermal)
      add("warning", "clocks", "thermal slowdown active: the GPU is too hot", "improve airflow or the fan curve");
    if ((g.clock_reasons & kAppClocks) && g.sm_mhz > 0 && g.sm_max_mhz > 0 && g.sm_mhz < g.sm_max_mhz * 9 / 10)
      add("warning", "clocks",
          "SM clock held at " + std::to_string(g.sm_mhz) + " of " + std::to_string(g.sm_max_mhz) +
              " MHz by application or locked clocks",
          "sudo nvidia-smi -i " + idx + " -rgc && sudo nvidia-smi -i " + idx + " -rac (reset locked and application clocks)");
  }
  if (busy(g) && g.sm_mhz > 0 && g.sm_max_mhz > 0 && g.sm_mhz < g.sm_max_mhz / 2 &&
      !(g.clock_reasons > 0 && (g.clock_reasons & ~kPowerCap)))
    add("warning", "clocks", "SM clock " + std::to_string(g.sm_mhz) + " of " + std::to_string(g.sm_max_mhz) + " MHz under load",
        "see nvidia-smi -q -d PERFORMANCE,CLOCK for what holds it");
  // Power, persistence, ECC, MIG.
  if (g.power_limit_w > 0 && g.power_default_w > 0 && g.power_limit_w * 100 < g.power_default_w * 95)
    add("warning", "power", "power limit " + std::to_string(g.power_limit_w) + " W, below the default " +
                                std::to_string(g.power_default_w) + " W",
        "sudo nvidia-smi -i " + idx + " -pl " + std::to_string(g.power_default_w) + ", and find what lowers it at boot");
  if (g.persistence == 0)
    add("note", "persistence", "persistence mode off: the driver may unload between runs (slower start)",
        "sudo systemctl enable --now nvidia-persistenced");
  if (g.ecc >= 0 && g.ecc_pending >= 0 && g.ecc != g.ecc_pending)
    add("warning", "ecc", std::string("ECC turns ") + (g.ecc_pending ? "on" : "off") + " at the next reboot",
        "reboot, or undo it with nvidia-smi -i " + idx + " -e " + std::to_string(g.ecc));
  if (g.mig == 1)
    add("warning", "mig", "MIG mode on: CUDA sees MIG slices of this GPU, not the whole GPU",
        "sudo nvidia-smi -i " + idx + " -mig 0 with no process on the GPU, then reset it");
  else if (g.mig >= 0 && g.mig_pending >= 0 && g.mig != g.mig_pending)
    add("note", "mig", "a MIG mode change waits for a GPU reset", "sudo nvidia-smi -i " + idx + " -r");
  return f;
}

std::vector<Finding> check_host(const std::vector<DeviceNode>& nodes, const std::string& cuda_driver,
                                const std::string& cuda_runtime) {
  std::vector<Finding> f;
  bool ctl = false, uvm = false;
  for (const DeviceNode& n : nodes) {
    ctl |= n.path == "/dev/nvidiactl";
    uvm |= n.path == "/dev/nvidia-uvm";
    if (n.rw) continue;
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", n.mode & 07777);
    const bool group_rw = (n.mode & 060) == 060 && !n.group.empty() && n.group != "root";
    f.push_back({"problem", "access", "no read/write access to " + n.path + " (group " + n.group + ", mode " + mode + ")",
                 group_rw ? "add yourself to the group: sudo usermod -aG " + n.group + " $USER, then log in again"
                          : std::string("the node is closed to you: set NVreg_DeviceFileMode=0666 (or NVreg_DeviceFileGID) in "
                                        "/etc/modprobe.d/nvidia.conf, or in a container pass the GPUs with --gpus all")});
  }
  if (ctl && !uvm)
    f.push_back({"problem", "access", "/dev/nvidia-uvm is missing: CUDA cannot start",
                 "sudo modprobe nvidia-uvm (or nvidia-modprobe -u -c=0)"});
  if (nodes.empty())
    f.push_back({"note", "access", "no /dev/nvidia* nodes: no NVIDIA driver loaded here",
                 "install and load the NVIDIA driver; in a container, start it with the NVIDIA container toolkit (--gpus all)"});
  const int d = version(cuda_driver), r = version(cuda_runtime);
  if (d > 0 && r > 0 && d < r)
    f.push_back({"problem", "driver",
                 "the driver supports CUDA " + cuda_driver + ", older than this build's runtime " + cuda_runtime,
                 "update the NVIDIA driver (CUDA 13 needs 580 or newer), or on a datacenter GPU install cuda-compat for " +
                     cuda_runtime});
  return f;
}

}  // namespace ernie
