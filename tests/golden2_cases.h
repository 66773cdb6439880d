// The samplers-and-LoRA golden set (tests/data/samplers-lora/golden2.*, from diffusers): the tensors, the JSON
// case descriptions, and a case as a request from its initial latents. Shared by the CPU and CUDA tests.
#pragma once
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "golden_cases.h"
#include "io/safetensors.h"

namespace ernie::test {

inline std::string golden2_dir() { return data_dir() + "/samplers-lora"; }
inline const SafeTensorsFile& golden2() {
  static std::shared_ptr<SafeTensorsFile> g = SafeTensorsFile::open(golden2_dir() + "/golden2.safetensors");
  return *g;
}
// golden2.json is Python's json.dump: lambda_min_clipped is -Infinity, which JSON proper has not; read as null.
inline const nlohmann::json& golden2_json() {
  static const nlohmann::json j = [] {
    std::ifstream f(golden2_dir() + "/golden2.json");
    std::string text(std::istreambuf_iterator<char>(f), {});
    for (size_t p; (p = text.find("-Infinity")) != std::string::npos;) text.replace(p, 9, "null");
    return nlohmann::json::parse(text);
  }();
  return j;
}
// A case (golden2_json()["samplers"][n], or ["lora"]) as a request from its initial latents `latents_key`.
inline GenerateRequest golden2_request(const nlohmann::json& c, const std::string& latents_key) {
  GenerateRequest r = request_of_case(c);
  r.init_latents = golden2().tensor(latents_key).clone();
  return r;
}
inline GenerateRequest sampler_request(int n, SamplerKind kind) {
  GenerateRequest r = golden2_request(golden2_json()["samplers"][size_t(n)],
                                      "samplers.case." + std::to_string(n) + ".latents_init");
  r.sampler = kind;
  return r;
}
inline GenerateRequest lora_request(std::vector<LoraRef> loras) {
  GenerateRequest r = golden2_request(golden2_json()["lora"], "lora.latents_init");
  r.loras = std::move(loras);
  return r;
}

}  // namespace ernie::test
