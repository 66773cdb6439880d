// The engine flags every front end shares (generate, serve, bench, encode): registered once, one default
// each (docs/cli.md), written into an EngineOptions for Engine::open.
#pragma once
#include <string>

#include "commands.h"
#include "engine/options.h"

namespace ernie::cli {

// --model (a folder or a converted file), required unless a command has another source (bench --random).
void add_model_flag(CLI::App& cmd, EngineOptions& o, bool required = true);  // and add_component_flags
// --diffusion-model: component files replacing those of --model.
void add_component_flags(CLI::App& cmd, ComponentFiles& f);

// --device --dtype --quantize --attention --threads --offload --max-vram --vae-tiling --vae-tile. The --offload
// help names o.default_offload; a front end that changes it (serve) says why in `default_offload_why`.
void add_engine_flags(CLI::App& cmd, EngineOptions& o, const std::string& default_offload_why = "");

}  // namespace ernie::cli
