// The diffusers golden end-to-end cases (golden.json `cases`) as generation requests, from the given
// initial latents; the expected latents and image are golden tensors "case.<n>.latents_final" / ".image".
#pragma once
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "golden.h"
#include "engine/engine.h"

namespace ernie::test {

// The fields every golden set's JSON case records: prompt, negative prompt, size, steps, cfg.
inline GenerateRequest request_of_case(const nlohmann::json& c) {
  GenerateRequest r;
  r.prompt = c["prompt"].get<std::string>();
  r.negative_prompt = c["negative_prompt"].get<std::string>();
  r.height = c["height"].get<int>();
  r.width = c["width"].get<int>();
  r.steps = c["steps"].get<int>();
  r.cfg = c["cfg"].get<float>();
  return r;
}

inline GenerateRequest golden_case(int n) {
  std::ifstream f(golden_json());
  GenerateRequest r = request_of_case(nlohmann::json::parse(f)["cases"][size_t(n)]);
  r.init_latents = golden_tensor("case." + std::to_string(n) + ".latents_init").clone();
  return r;
}

}  // namespace ernie::test
