// doctor's GPU topology (issue 28, --gpus/--parallel): for every pair of GPUs, what connects them (NVLink, or the
// PCIe path NVML names by their closest common ancestor) and whether CUDA lets each read the other's memory (peer
// access, which NCCL uses inside one host). Readings from NVML (core/nvml.cpp) and CUDA; the rules are pure
// functions of them, so tests feed them fake readings (as core/gpu_health.h's).
#pragma once
#include <string>
#include <vector>

#include "core/gpu_health.h"

namespace ernie {

// nvmlGpuTopologyLevel_t: the closest common ancestor of two GPUs on the PCIe tree.
enum TopologyLevel : int {
  kTopoUnknown = -1,
  kTopoInternal = 0,     // two GPUs on one board
  kTopoSingle = 10,      // one PCIe switch
  kTopoMultiple = 20,    // several PCIe switches, no host bridge
  kTopoHostBridge = 30,  // a PCIe host bridge
  kTopoNode = 40,        // host bridges within one NUMA node
  kTopoSystem = 50,      // across NUMA nodes (the CPUs' SMP interconnect)
};

// Two GPUs (CUDA indices a < b); -1 where it could not be read.
struct GpuPairReading {
  int a = -1, b = -1;
  int peer_ab = -1, peer_ba = -1;  // cudaDeviceCanAccessPeer in each direction (0/1)
  int ancestor = kTopoUnknown;     // TopologyLevel
  int nvlink = -1;                 // NVML's P2P status says NVLink connects them (0/1)
  int nvlinks_a = -1, nvlinks_b = -1;  // active NVLinks of each GPU (to anything: a peer or an NVSwitch)
};

// "NVLink", "PCIe switch", "PCIe host bridge", "across CPU sockets", ... ("unknown" without readings).
std::string link_name(const GpuPairReading& p);
// Findings for --parallel over this pair: no peer access (a warning: NCCL then stages through host memory),
// a path across CPU sockets without NVLink (a note: pick GPUs of one socket).
std::vector<Finding> check_pair(const GpuPairReading& p);

// NVML's readings for every pair of `gpus` (their PCI bus ids; NVML started as read_nvml does): the common ancestor,
// the NVLink P2P status and active link counts. Returns "" or why NVML gave nothing.
std::string read_nvml_topology(const std::vector<GpuReadings>& gpus, std::vector<GpuPairReading>& pairs);

}  // namespace ernie
