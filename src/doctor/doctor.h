// `ernie-image doctor`: what is wrong with this machine or this model folder, as JSON.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "io/component_files.h"

namespace ernie {

struct DoctorReport {
  nlohmann::json json;  // the full report
  int problems = 0;     // fatal problems found; 0 means all is well
};

struct DoctorOptions {
  // Read every tensor of each safetensors file that records a data checksum (io/safetensors.h) and compare.
  // Without it, only the metadata is read: an incomplete file (its writer never finished) is still reported.
  bool verify = false;
  int threads = 0;  // for --verify; 0: OpenMP's thread count
  ComponentFiles files;  // --diffusion-model ...: each replaces that component of the model
};

// `model_dir` may be empty (machine only). Besides the model's configs and tensors, it loads the tokenizers,
// renders the prompt enhancer's chat template once and parses pe/generation_config.json, each failure a problem.
DoctorReport run_doctor(const std::string& model_dir, const DoctorOptions& opt = {});
// Human-readable rendering of the JSON report.
std::string format_doctor(const nlohmann::json& report);

}  // namespace ernie
