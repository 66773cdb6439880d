// doctor's GPU topology section (issue 28): every pair of visible GPUs, their link and peer access
// (core/gpu_topology.h), and whether this build drives several GPUs through NCCL. Findings also go to the
// report's warnings.
#pragma once
#include <nlohmann/json.hpp>
#include <ostream>

#include "core/system_info.h"

namespace ernie {

void add_gpu_topology(const SystemInfo& si, nlohmann::json& report);  // report["topology"]
void format_gpu_topology(const nlohmann::json& report, std::ostream& o);

}  // namespace ernie
