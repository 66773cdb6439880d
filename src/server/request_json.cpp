#include "server/request_json.h"

#include "engine/noise.h"
#include "engine/samplers/sampler_kind.h"
#include "io/png.h"
#include "server/form_data.h"

namespace ernie::server {

namespace {
std::string png_base64(const Image& im) {
  const std::vector<uint8_t> png = encode_png(im.width, im.height, im.rgb, {}, im.alpha);
  return base64_encode(std::string(png.begin(), png.end()));
}
}  // namespace

nlohmann::json request_to_json(const ParsedRequest& p, bool images) {
  const GenerateRequest& r = p.req;
  nlohmann::json j = {{"prompt", r.prompt}, {"n", r.num_images}, {"seed", r.seed}, {"use_pe", r.use_pe},
                      {"sampler", sampler_id(r.sampler)}, {"rng", rng_name(r.rng)}};
  if (!r.negative_prompt.empty()) j["negative_prompt"] = r.negative_prompt;
  if (r.width > 0 && r.height > 0) j["size"] = std::to_string(r.width) + "x" + std::to_string(r.height);
  if (r.steps > 0) j["steps"] = r.steps;
  if (r.cfg >= 0) j["guidance_scale"] = r.cfg;
  if (r.shift > 0) j["shift"] = r.shift;
  if (p.url) j["response_format"] = "url";
  nlohmann::json loras = nlohmann::json::array();
  for (const LoraRef& l : r.loras)
    if (!l.from_tag) loras.push_back({{"name", l.name}, {"scale", l.scale}});  // tags stay in the prompt
  if (!loras.empty()) j["loras"] = std::move(loras);
  if (r.strength > 0) j["strength"] = r.strength;
  if (r.init_image && !images) j["img2img"] = {{"strength", j.value("strength", nlohmann::json())}, {"mask", r.mask.has_value()}};
  if (r.init_image && images) j["image"] = png_base64(*r.init_image);
  if (r.mask && images) j["mask"] = png_base64(*r.mask);
  if (r.mask_blur) j["mask_blur"] = r.mask_blur;
  if (r.composite) j["composite"] = true;
  if (r.resize) j["resize"] = true;
  return j;
}

nlohmann::json job_params(nlohmann::json request) {
  if (!request.is_object()) return nlohmann::json::object();
  if (request.contains("image")) {
    request["img2img"] = {{"strength", request.value("strength", nlohmann::json())}, {"mask", request.contains("mask")}};
    request.erase("image");
    request.erase("mask");
  }
  return request;
}

}  // namespace ernie::server
