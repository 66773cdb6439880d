// doctor's GPU section: per visible GPU the kernel each op takes (ops::kernel_paths) and the hardware
// checklist (core/gpu_health.h, read through NVML), and the host's checks (/dev/nvidia* access, driver
// against runtime). Problems and warnings also go to the report's lists.
#pragma once
#include <nlohmann/json.hpp>
#include <ostream>

#include "core/system_info.h"

namespace ernie {

void add_gpu_checks(const SystemInfo& si, nlohmann::json& report);
void format_gpu_checks(const nlohmann::json& gpu, std::ostream& o);  // one entry of report["gpus"]
void format_host_checks(const nlohmann::json& report, std::ostream& o);

}  // namespace ernie
