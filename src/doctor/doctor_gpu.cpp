#include "doctor/doctor_gpu.h"

#include <cstdio>

#include "core/gpu_health.h"
#include "doctor/card_recipes.h"
#include "ops/ops.h"

using json = nlohmann::json;

namespace ernie {

namespace {

json finding_json(const Finding& f) {
  return {{"level", f.level}, {"check", f.check}, {"message", f.message}, {"fix", f.fix}};
}

void file(const Finding& f, const std::string& where, json& report) {
  if (f.level == "problem") report["problems"].push_back(where + f.message + " (fix: " + f.fix + ")");
  else if (f.level == "warning") report["warnings"].push_back(where + f.message + " (fix: " + f.fix + ")");
}

json readings_json(const GpuReadings& g) {
  return {{"pci_bus_id", g.pci_bus_id},
          {"pcie", {{"gen", g.pcie_gen}, {"gen_max", g.pcie_gen_max}, {"gen_gpu_max", g.pcie_gen_gpu_max},
                    {"width", g.pcie_width}, {"width_max", g.pcie_width_max}}},
          {"memory_bytes", g.memory_bytes},
          {"bar1_bytes", g.bar1_bytes},
          {"clocks_mhz", {{"sm", g.sm_mhz}, {"sm_max", g.sm_max_mhz}, {"mem", g.mem_mhz}, {"mem_max", g.mem_max_mhz}}},
          {"clock_reasons", clock_reason_names(g.clock_reasons)},
          {"utilization", g.utilization},
          {"power_w", {{"limit", g.power_limit_w}, {"default", g.power_default_w}}},
          {"persistence", g.persistence},
          {"ecc", g.ecc},
          {"mig", g.mig}};
}

}  // namespace

void add_gpu_checks(const SystemInfo& si, json& j) {
  std::vector<GpuReadings> readings;
  for (const GpuInfo& g : si.gpus) {
    GpuReadings r;
    r.cuda_index = g.index;
    r.name = g.name;
    r.pci_bus_id = g.pci_bus_id;
    readings.push_back(r);
  }
  const std::string nvml_error = readings.empty() ? "" : read_nvml(readings);
  j["nvml"] = nvml_error.empty() ? json{{"available", !readings.empty()}} : json{{"available", false}, {"why", nvml_error}};
  for (size_t i = 0; i < si.gpus.size(); ++i) {
    json& g = j["gpus"][i];
    const Device d{DeviceKind::CUDA, si.gpus[i].index};
    const std::string why = ops::unusable_reason(d);
    if (!why.empty()) j["problems"].push_back(why);
    if (why.empty()) {
      const GpuInfo& gi = si.gpus[i];
      g["recipe"] = describe(card_recipe(double(gi.total_bytes) / double(1ull << 30), gi.cc_major * 10 + gi.cc_minor));
    }
    g["kernels"] = json::object();
    for (const ops::KernelPath& p : ops::kernel_paths(d)) g["kernels"][p.op] = p.path;
    if (!nvml_error.empty()) continue;
    g["hardware"] = readings_json(readings[i]);
    g["findings"] = json::array();
    for (const Finding& f : check_gpu(readings[i])) {
      g["findings"].push_back(finding_json(f));
      file(f, "GPU " + std::to_string(si.gpus[i].index) + ": ", j);
    }
  }
  json host = json::array();
  for (const Finding& f : check_host(read_device_nodes(), si.cuda_driver, si.cuda_runtime)) {
    host.push_back(finding_json(f));
    file(f, "", j);
  }
  j["host_findings"] = host;
}

void format_gpu_checks(const json& g, std::ostream& o) {
  {
    if (g.contains("recipe")) o << "  " << g["recipe"].get<std::string>() << "\n";
    if (g.contains("kernels"))
      for (auto it = g["kernels"].begin(); it != g["kernels"].end(); ++it)
        o << "  " << it.key() << ": " << it.value().get<std::string>() << "\n";
    if (!g.contains("hardware")) return;
    const json& h = g["hardware"];
    char line[320];
    std::snprintf(line, sizeof line,
                  "  hardware: PCIe Gen%d x%d (max Gen%d x%d), BAR1 %.0f MiB, SM %d/%d MHz, memory %d/%d MHz, "
                  "power limit %d W (default %d W), clocks held by: %s\n",
                  h["pcie"]["gen"].get<int>(), h["pcie"]["width"].get<int>(), h["pcie"]["gen_max"].get<int>(),
                  h["pcie"]["width_max"].get<int>(), double(h["bar1_bytes"].get<uint64_t>()) / double(1 << 20),
                  h["clocks_mhz"]["sm"].get<int>(), h["clocks_mhz"]["sm_max"].get<int>(),
                  h["clocks_mhz"]["mem"].get<int>(), h["clocks_mhz"]["mem_max"].get<int>(),
                  h["power_w"]["limit"].get<int>(), h["power_w"]["default"].get<int>(),
                  h["clock_reasons"].get<std::string>().c_str());
    o << line;
    auto onoff = [](const json& v) { return v.get<int>() < 0 ? "unknown" : v.get<int>() ? "on" : "off"; };
    o << "  persistence " << onoff(h["persistence"]) << ", ECC " << onoff(h["ecc"]) << ", MIG " << onoff(h["mig"]) << "\n";
    for (const json& f : g["findings"])
      o << "  " << f["level"].get<std::string>() << ": " << f["message"].get<std::string>()
        << "\n    fix: " << f["fix"].get<std::string>() << "\n";
    if (g["findings"].empty()) o << "  hardware checks: all pass\n";
  }
}

void format_host_checks(const json& j, std::ostream& o) {
  if (j.contains("nvml") && j["nvml"].contains("why")) o << "  " << j["nvml"]["why"].get<std::string>() << "\n";
  if (j.contains("host_findings"))
    for (const json& f : j["host_findings"])
      o << "host " << f["level"].get<std::string>() << ": " << f["message"].get<std::string>()
        << "\n    fix: " << f["fix"].get<std::string>() << "\n";
}

}  // namespace ernie
