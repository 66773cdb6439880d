// `ernie-image doctor`: what is wrong with this machine or this model folder, as JSON.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace ernie {

struct DoctorReport {
  nlohmann::json json;  // the full report
  int problems = 0;     // fatal problems found; 0 means all is well
};

// `model_dir` may be empty (machine only).
DoctorReport run_doctor(const std::string& model_dir);
// Human-readable rendering of the JSON report.
std::string format_doctor(const nlohmann::json& report);

}  // namespace ernie
