// The AUTOMATIC1111 web API (/sdapi/v1/*) as pure functions, no HTTP: what Open WebUI, SillyTavern (its `auto`
// and `sdcpp` sources) and LibreChat send, mapped onto our requests, and our results in A1111's response shapes.
// The routes (a1111_routes.cpp) only glue these to the job queue. docs/server.md lists what is used and ignored.
//
// Errors throw ApiException: a body field of the wrong type or out of range is a 422 naming the field (FastAPI's
// status), an A1111 feature this engine does not have and that would change the image (enable_hr, restore_faces,
// tiling, styles, scripts, ...) a 422 naming it; error_json() gives FastAPI's shape.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/lora_library.h"
#include "server/api_error.h"
#include "server/request_parse.h"

namespace ernie::server::a1111 {

struct Request {
  ParsedRequest parsed;        // our request, num_images = batch_size * n_iter; seed_given false for seed -1
  int batch_size = 1, n_iter = 1;
  std::string sampler_name;    // A1111's spelling of the sampler that runs ("Euler")
  std::string scheduler;       // A1111's scheduler name ("automatic")
  nlohmann::json parameters;   // the body as A1111 echoes it (images left out); completed by response()
};

// POST /sdapi/v1/txt2img (img2img false) or /sdapi/v1/img2img: the JSON body -> our request (unresolved).
Request parse_request(const std::string& body, bool img2img, const ParseLimits& lim = {});

// A1111's sampler and scheduler names -> ours; anything else is a 422 listing the accepted names.
SamplerKind parse_sampler_name(const std::string& name);
std::string parse_scheduler(const std::string& name);  // the canonical name ("automatic")

// The response of txt2img/img2img: {"images": [base64 PNG], "parameters": {...}, "info": "<JSON text>"}, from the
// resolved request and the PNGs the queue made (their `parameters` chunk gives the infotexts).
nlohmann::json response(const Request& a, const GenerateRequest& resolved, const std::vector<std::string>& pngs,
                        const std::string& model_name, int64_t created_unix);

// A1111's infotext (the PNG `parameters` text) -> {"Prompt", "Negative prompt", "Steps", ..., "Size-1", "Size-2"}.
nlohmann::json parse_infotext(const std::string& text);
// POST /sdapi/v1/png-info {"image": base64 PNG/JPEG/WebP} -> {"info": text, "items": {other chunks}, "parameters": {...}}.
nlohmann::json png_info(const std::string& body, const ParseLimits& lim = {});

// The GET lists.
nlohmann::json sd_models(const std::string& model_name, const std::string& model_dir);
nlohmann::json samplers();
nlohmann::json schedulers();
nlohmann::json upscalers();
nlohmann::json latent_upscale_modes();
nlohmann::json sd_vae();
nlohmann::json loras(const std::vector<LoraLibrary::Available>& available, const std::string& lora_dir);
nlohmann::json options(const std::string& model_name);
// POST /sdapi/v1/options: a JSON object; sd_model_checkpoint must name the model served (there is one), other keys
// are accepted and ignored. Throws ApiException.
void check_options(const std::string& body, const std::string& model_name);

// GET /sdapi/v1/progress from the running job's describe() (null when idle) and the number of jobs queued or running.
nlohmann::json progress(const nlohmann::json& running, int job_count);

// With an API key: `Authorization: Bearer KEY`, or A1111's HTTP Basic auth with the key as the password (any user
// name). `fields` is how many Authorization headers came. True without a key.
bool authorized(int fields, const std::string& authorization, const std::string& api_key);

// FastAPI's error bodies: 422 {"detail": [{"loc": ["body", field], "msg", "type"}]}, else {"detail": message,
// "error": code}.
nlohmann::json error_json(const ApiError& e);

}  // namespace ernie::server::a1111
