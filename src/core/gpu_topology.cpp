#include "core/gpu_topology.h"

namespace ernie {

std::string link_name(const GpuPairReading& p) {
  if (p.nvlink == 1) return "NVLink";
  switch (p.ancestor) {
    case kTopoInternal: return "one board";
    case kTopoSingle: return "PCIe switch";
    case kTopoMultiple: return "PCIe switches";
    case kTopoHostBridge: return "PCIe host bridge";
    case kTopoNode: return "PCIe through the CPU (one NUMA node)";
    case kTopoSystem: return "across CPU sockets";
    default: return "unknown";
  }
}

std::vector<Finding> check_pair(const GpuPairReading& p) {
  std::vector<Finding> f;
  const std::string pair = "cuda:" + std::to_string(p.a) + " and cuda:" + std::to_string(p.b);
  if (p.peer_ab == 0 || p.peer_ba == 0)
    f.push_back({"warning", "peer",
                 pair + " cannot access each other's memory (peer access " + (p.peer_ab == 1 ? "one way" : "off") +
                     "): NCCL stages their exchange through host memory, so --parallel gains less",
                 "enable PCIe peer-to-peer: IOMMU in passthrough (iommu=pt), ACS off on the PCIe switches (BIOS), or "
                 "pick GPUs under one switch or with NVLink for --gpus"});
  if (p.nvlink != 1 && p.ancestor == kTopoSystem)
    f.push_back({"note", "topology", pair + " are attached to different CPU sockets: each exchange crosses the "
                 "sockets' interconnect",
                 "for --gpus, pick GPUs of one socket (nvidia-smi topo -m)"});
  return f;
}

}  // namespace ernie
