// doctor's hardware checklist: each rule fed fake readings, healthy and faulty (core/gpu_health.h).
#include <gtest/gtest.h>

#include <algorithm>

#include "core/gpu_health.h"

namespace ernie {
namespace {

constexpr uint64_t kGiB = uint64_t(1) << 30;

// An H200 at work, everything as it should be.
GpuReadings healthy() {
  GpuReadings g;
  g.cuda_index = 0;
  g.name = "NVIDIA H200";
  g.pcie_gen = g.pcie_gen_max = g.pcie_gen_gpu_max = 5;
  g.pcie_width = g.pcie_width_max = 16;
  g.memory_bytes = 143771ull << 20;
  g.bar1_bytes = 256 * kGiB;
  g.sm_mhz = g.sm_max_mhz = 1980;
  g.mem_mhz = g.mem_max_mhz = 3201;
  g.clock_reasons = 0;
  g.utilization = 100;
  g.power_limit_w = g.power_default_w = 700;
  g.persistence = 1, g.ecc = g.ecc_pending = 1, g.mig = g.mig_pending = 0;
  return g;
}

// The findings of one check, by level.
std::vector<std::string> levels(const std::vector<Finding>& f, const std::string& check) {
  std::vector<std::string> out;
  for (const Finding& x : f)
    if (x.check == check) out.push_back(x.level);
  return out;
}
using V = std::vector<std::string>;

TEST(GpuHealth, AHealthyGpuHasNoFindings) {
  EXPECT_TRUE(check_gpu(healthy()).empty());
  GpuReadings unknown;  // nothing read: nothing claimed
  unknown.name = "Some Future GPU";
  EXPECT_TRUE(check_gpu(unknown).empty());
}

TEST(GpuHealth, PcieWidthAndSpeed) {
  GpuReadings g = healthy();
  g.pcie_width = 8;
  auto f = check_gpu(g);
  ASSERT_EQ(levels(f, "pcie"), V{"warning"});
  EXPECT_NE(f[0].message.find("x8 of x16"), std::string::npos);
  EXPECT_NE(f[0].fix.find("bifurcation"), std::string::npos);

  g = healthy();
  g.pcie_gen = 3;  // under load: a real fault
  EXPECT_EQ(levels(check_gpu(g), "pcie"), V{"warning"});
  g.utilization = 0, g.clock_reasons = 0x1;  // idle: the link slows by design
  EXPECT_EQ(levels(check_gpu(g), "pcie"), V{"note"});

  g = healthy();
  g.pcie_gen = g.pcie_gen_max = 4;  // a Gen5 GPU in a Gen4 host
  EXPECT_EQ(levels(check_gpu(g), "pcie"), V{"note"});
}

TEST(GpuHealth, SmallBar1MeansNoResizableBar) {
  GpuReadings g = healthy();
  g.name = "NVIDIA GeForce RTX 4090";
  g.memory_bytes = 24 * kGiB;
  g.bar1_bytes = 256ull << 20;
  auto f = check_gpu(g);
  ASSERT_EQ(levels(f, "bar1"), V{"warning"});
  EXPECT_NE(f[0].message.find("256 MiB"), std::string::npos);
  EXPECT_NE(f[0].fix.find("Resizable BAR"), std::string::npos);
  g.bar1_bytes = 32 * kGiB;
  EXPECT_TRUE(levels(check_gpu(g), "bar1").empty());
}

TEST(GpuHealth, VisibleMemoryAgainstTheNominal) {
  EXPECT_EQ(nominal_memory_gib("NVIDIA RTX PRO 6000 Blackwell Workstation Edition"), 96);
  EXPECT_EQ(nominal_memory_gib("NVIDIA A100-SXM4-80GB"), 80);
  EXPECT_EQ(nominal_memory_gib("NVIDIA H100 80GB HBM3"), 80);
  EXPECT_EQ(nominal_memory_gib("NVIDIA L4"), 24);
  EXPECT_EQ(nominal_memory_gib("NVIDIA L40S"), 48);
  EXPECT_EQ(nominal_memory_gib("NVIDIA A10"), 24);
  EXPECT_EQ(nominal_memory_gib("NVIDIA GeForce RTX 3080 Ti"), 12);
  EXPECT_EQ(nominal_memory_gib("Some Future GPU"), 0);

  GpuReadings g = healthy();
  g.name = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition";
  g.memory_bytes = 64 * kGiB;  // the field report's 64 of 96
  auto f = check_gpu(g);
  ASSERT_EQ(levels(f, "memory"), V{"problem"});
  EXPECT_NE(f[0].message.find("64.0 GiB"), std::string::npos);
  g.memory_bytes = 97887ull << 20;  // all of it
  EXPECT_TRUE(levels(check_gpu(g), "memory").empty());
  g.name = "NVIDIA L40S";  // 48 GB with ECC on shows 44.5 GiB: not a fault
  g.memory_bytes = 46068ull << 20;
  EXPECT_TRUE(levels(check_gpu(g), "memory").empty());
}

TEST(GpuHealth, ClocksAndWhatHoldsThem) {
  GpuReadings g = healthy();
  g.clock_reasons = 0x80;  // power brake
  g.sm_mhz = 600;
  auto f = check_gpu(g);
  ASSERT_EQ(levels(f, "clocks"), V{"problem"});
  EXPECT_NE(f[0].message.find("power brake"), std::string::npos);
  EXPECT_NE(f[0].fix.find("power connector"), std::string::npos);

  g = healthy();
  g.clock_reasons = 0x20;
  EXPECT_EQ(levels(check_gpu(g), "clocks"), V{"warning"});

  g = healthy();
  g.clock_reasons = 0x2, g.sm_mhz = 1200;  // locked or application clocks
  f = check_gpu(g);
  ASSERT_EQ(levels(f, "clocks"), V{"warning"});
  EXPECT_NE(f[0].fix.find("-rgc"), std::string::npos);

  g = healthy();
  g.clock_reasons = 0x4, g.sm_mhz = 1700;  // at the power cap under load: normal
  EXPECT_TRUE(levels(check_gpu(g), "clocks").empty());
  g.clock_reasons = 0, g.sm_mhz = 700;  // slow under load with no reason given
  EXPECT_EQ(levels(check_gpu(g), "clocks"), V{"warning"});
  g.utilization = 0, g.clock_reasons = 0x1;  // idle and slow: normal
  EXPECT_TRUE(levels(check_gpu(g), "clocks").empty());
  EXPECT_EQ(clock_reason_names(0x1 | 0x4), "idle, power cap");
  EXPECT_EQ(clock_reason_names(-1), "none");
}

TEST(GpuHealth, PowerPersistenceEccMig) {
  GpuReadings g = healthy();
  g.power_limit_w = 450;
  auto f = check_gpu(g);
  ASSERT_EQ(levels(f, "power"), V{"warning"});
  EXPECT_NE(f[0].fix.find("-pl 700"), std::string::npos);
  g = healthy();
  g.persistence = 0;
  EXPECT_EQ(levels(check_gpu(g), "persistence"), V{"note"});
  g = healthy();
  g.ecc_pending = 0;
  EXPECT_EQ(levels(check_gpu(g), "ecc"), V{"warning"});
  g = healthy();
  g.mig = g.mig_pending = 1;
  g.memory_bytes = 70 * kGiB;  // a slice: reported as MIG, not as missing memory
  f = check_gpu(g);
  EXPECT_EQ(levels(f, "mig"), V{"warning"});
  EXPECT_TRUE(levels(f, "memory").empty());
}

TEST(GpuHealth, DeviceNodesAndDriverVersion) {
  std::vector<DeviceNode> ok = {{"/dev/nvidia-uvm", "root", 020666, true},
                                {"/dev/nvidia0", "root", 020666, true},
                                {"/dev/nvidiactl", "root", 020666, true}};
  EXPECT_TRUE(check_host(ok, "13.0", "13.0").empty());
  EXPECT_TRUE(check_host(ok, "13.1", "13.0").empty());

  auto closed = ok;
  closed[1] = {"/dev/nvidia0", "video", 020660, false};
  auto f = check_host(closed, "13.0", "13.0");
  ASSERT_EQ(levels(f, "access"), V{"problem"});
  EXPECT_NE(f[0].fix.find("usermod -aG video"), std::string::npos);
  closed[1] = {"/dev/nvidia0", "root", 020600, false};
  f = check_host(closed, "13.0", "13.0");
  ASSERT_EQ(levels(f, "access"), V{"problem"});
  EXPECT_NE(f[0].fix.find("NVreg_DeviceFileMode"), std::string::npos);

  auto no_uvm = ok;
  no_uvm.erase(no_uvm.begin());
  f = check_host(no_uvm, "13.0", "13.0");
  ASSERT_EQ(levels(f, "access"), V{"problem"});
  EXPECT_NE(f[0].fix.find("modprobe nvidia-uvm"), std::string::npos);

  EXPECT_EQ(levels(check_host({}, "", "13.0"), "access"), V{"note"});  // no driver here: said, not a problem

  f = check_host(ok, "12.4", "13.0");
  ASSERT_EQ(levels(f, "driver"), V{"problem"});
  EXPECT_NE(f[0].message.find("12.4"), std::string::npos);
}

}  // namespace
}  // namespace ernie

#include "doctor/card_recipes.h"

namespace ernie {
namespace {

TEST(CardRecipes, BySizeAndCapability) {
  EXPECT_EQ(card_recipe(139.8, 90).card_gib, 24);
  EXPECT_NE(card_recipe(23.6, 89).recipe.find("fp8"), std::string::npos);        // RTX 4090
  EXPECT_EQ(card_recipe(23.6, 86).recipe.find("fp8"), std::string::npos);        // RTX 3090: no fp8 tensor cores
  EXPECT_EQ(card_recipe(15.7, 89).card_gib, 16);
  EXPECT_NE(card_recipe(15.7, 86).recipe.find("Q4_K"), std::string::npos);
  EXPECT_EQ(card_recipe(11.7, 86).card_gib, 12);
  EXPECT_EQ(card_recipe(7.8, 89).card_gib, 8);
  EXPECT_NE(card_recipe(7.8, 89).recipe.find("--max-vram 8"), std::string::npos);
  EXPECT_EQ(card_recipe(5.8, 89).card_gib, 0);
  EXPECT_NE(describe(card_recipe(5.8, 89)).find("may not fit"), std::string::npos);
  for (double gib : {6.0, 8.0, 12.0, 16.0, 24.0, 80.0})
    for (int cc : {80, 89})  // every recipe fits the card it is for
      if (const CardRecipe r = card_recipe(gib, cc); r.card_gib) { EXPECT_LE(r.peak_gib, r.card_gib) << gib << " " << cc; }
}

}  // namespace
}  // namespace ernie
