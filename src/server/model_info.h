// The loaded engine as /v1/info describes it, written once for both servers: `serve` answers with it, and a
// shared-queue worker (`serve --queue … --role worker|all`) publishes it for the api nodes.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "engine/engine.h"

namespace ernie::server {

// model, engine version, device and dtype, variant (turbo), sizes, defaults, memory plan, prompt enhancer,
// samplers, the LoRAs (lora_list) and the limits requests are checked against (model_limits).
nlohmann::json engine_json(const Engine& e, const std::string& model_name);
// "cpu" or "cuda:0 NVIDIA H200".
std::string device_label(const EngineInfo& info);
// The dtype as --dtype spells it: "f32", "bf16".
std::string dtype_label(const EngineInfo& info);

}  // namespace ernie::server
