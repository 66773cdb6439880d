// doctor's GPU topology rules (core/gpu_topology.h) on fake readings: the link each reading names, and the
// findings for --parallel (no peer access, a path across CPU sockets).
#include <gtest/gtest.h>

#include "core/gpu_topology.h"

namespace ernie {
namespace {

GpuPairReading nvlinked() {  // two H200s of an HGX board: NVLink through NVSwitch, peer access both ways
  GpuPairReading p;
  p.a = 0, p.b = 1;
  p.peer_ab = p.peer_ba = 1;
  p.ancestor = kTopoSystem;  // NVML's PCIe path may cross sockets while NVLink connects them
  p.nvlink = 1;
  p.nvlinks_a = p.nvlinks_b = 18;
  return p;
}

TEST(GpuTopology, LinkNames) {
  EXPECT_EQ(link_name(nvlinked()), "NVLink");
  GpuPairReading p = nvlinked();
  p.nvlink = 0;
  EXPECT_EQ(link_name(p), "across CPU sockets");
  p.ancestor = kTopoSingle;
  EXPECT_EQ(link_name(p), "PCIe switch");
  p.ancestor = kTopoHostBridge;
  EXPECT_EQ(link_name(p), "PCIe host bridge");
  p.ancestor = kTopoNode;
  EXPECT_EQ(link_name(p), "PCIe through the CPU (one NUMA node)");
  EXPECT_EQ(link_name(GpuPairReading{}), "unknown");
}

TEST(GpuTopology, HealthyPairsHaveNoFindings) {
  EXPECT_TRUE(check_pair(nvlinked()).empty());
  GpuPairReading p = nvlinked();
  p.nvlink = 0, p.ancestor = kTopoSingle;  // PCIe under one switch, P2P on
  EXPECT_TRUE(check_pair(p).empty());
  EXPECT_TRUE(check_pair(GpuPairReading{}).empty());  // nothing read: nothing claimed
}

TEST(GpuTopology, NoPeerAccessIsAWarning) {
  GpuPairReading p = nvlinked();
  p.nvlink = 0, p.ancestor = kTopoHostBridge;
  p.peer_ab = p.peer_ba = 0;
  auto f = check_pair(p);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].level, "warning");
  EXPECT_EQ(f[0].check, "peer");
  EXPECT_NE(f[0].message.find("cuda:0 and cuda:1 cannot access each other's memory (peer access off)"),
            std::string::npos) << f[0].message;
  EXPECT_NE(f[0].fix.find("ACS"), std::string::npos);
  p.peer_ab = 1;
  f = check_pair(p);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].message.find("peer access one way"), std::string::npos) << f[0].message;
}

TEST(GpuTopology, AcrossSocketsWithoutNvlinkIsANote) {
  GpuPairReading p = nvlinked();
  p.nvlink = 0;
  auto f = check_pair(p);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].level, "note");
  EXPECT_EQ(f[0].check, "topology");
  EXPECT_NE(f[0].fix.find("nvidia-smi topo -m"), std::string::npos);
}

}  // namespace
}  // namespace ernie
