#include "doctor/doctor_topology.h"

#include "core/gpu_topology.h"
#include "ops/collectives/nccl_communicator.h"
#include "ops/peer_access.h"

using json = nlohmann::json;

namespace ernie {

void add_gpu_topology(const SystemInfo& si, json& j) {
  json t = {{"nccl_linked", nccl_built()}, {"nccl", linked_nccl_version()}, {"pairs", json::array()}};
  std::vector<GpuReadings> gpus;
  std::vector<GpuPairReading> pairs;
  for (const GpuInfo& g : si.gpus) {
    GpuReadings r;
    r.cuda_index = g.index;
    r.pci_bus_id = g.pci_bus_id;
    gpus.push_back(r);
  }
  for (size_t a = 0; a < gpus.size(); ++a)
    for (size_t b = a + 1; b < gpus.size(); ++b) {
      GpuPairReading p;
      p.a = gpus[a].cuda_index;
      p.b = gpus[b].cuda_index;
      p.peer_ab = ops::peer_access(p.a, p.b);
      p.peer_ba = ops::peer_access(p.b, p.a);
      pairs.push_back(p);
    }
  if (!pairs.empty())
    if (const std::string why = read_nvml_topology(gpus, pairs); !why.empty()) t["nvml_error"] = why;
  for (const GpuPairReading& p : pairs) {
    json f = json::array();
    for (const Finding& x : check_pair(p)) {
      f.push_back({{"level", x.level}, {"check", x.check}, {"message", x.message}, {"fix", x.fix}});
      if (x.level == "warning") j["warnings"].push_back(x.message + " (fix: " + x.fix + ")");
    }
    t["pairs"].push_back({{"gpus", {p.a, p.b}}, {"link", link_name(p)}, {"ancestor", p.ancestor},
                          {"nvlink", p.nvlink}, {"nvlinks", {p.nvlinks_a, p.nvlinks_b}},
                          {"peer_access", {p.peer_ab, p.peer_ba}}, {"findings", f}});
  }
  j["topology"] = t;
}

void format_gpu_topology(const json& j, std::ostream& o) {
  if (!j.contains("topology")) return;
  const json& t = j["topology"];
  o << "GPU topology: --gpus/--parallel " << (t["nccl_linked"].get<bool>() ? "through NCCL " + t["nccl"].get<std::string>()
                                                                            : std::string("need NCCL (not in this build)"))
    << "\n";
  if (t["pairs"].empty()) o << "  fewer than two GPUs: --parallel cfg needs two (--parallel-local checks the split on one)\n";
  auto yn = [](const json& v) { return v.get<int>() < 0 ? "unknown" : v.get<int>() ? "yes" : "no"; };
  for (const json& p : t["pairs"]) {
    o << "  cuda:" << p["gpus"][0].get<int>() << " <-> cuda:" << p["gpus"][1].get<int>() << ": "
      << p["link"].get<std::string>();
    if (p["nvlinks"][0].get<int>() > 0) o << " (" << p["nvlinks"][0].get<int>() << "/" << p["nvlinks"][1].get<int>()
                                          << " NVLinks active)";
    o << ", peer access " << yn(p["peer_access"][0]) << "/" << yn(p["peer_access"][1]) << "\n";
    for (const json& f : p["findings"])
      o << "  " << f["level"].get<std::string>() << ": " << f["message"].get<std::string>()
        << "\n    fix: " << f["fix"].get<std::string>() << "\n";
  }
  if (t.contains("nvml_error")) o << "  links unknown: " << t["nvml_error"].get<std::string>() << "\n";
}

}  // namespace ernie
