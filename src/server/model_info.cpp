#include "server/model_info.h"

#include <cctype>

#include "core/dtype.h"
#include "engine/metadata.h"
#include "ops/ops.h"
#include "server/http_common.h"

namespace ernie::server {
using nlohmann::json;

std::string device_label(const EngineInfo& info) {
  if (info.device.is_cpu()) return "cpu";
  return info.device.str() + " " + ops::device_name(info.device);
}

std::string dtype_label(const EngineInfo& info) {
  std::string s = dtype_name(info.dtype);
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

json engine_json(const Engine& e, const std::string& model_name) {
  GenerateRequest probe;
  probe.prompt = "x";
  const GenerateRequest d = e.resolve(probe);
  const ModelLimits& l = e.limits();
  json sizes = json::array(), loras = json::array();
  for (auto [w, h] : e.supported_sizes()) sizes.push_back(size_str(w, h));
  for (const LoraLibrary::Available& a : e.available_loras())
    loras.push_back({{"name", a.name}, {"bytes", a.bytes}, {"tag", "<lora:" + a.name + ":1>"}});
  return {{"model", model_name},
          {"engine", engine_version()},
          {"device", device_label(e.info())},
          {"dtype", dtype_label(e.info())},
          {"turbo", e.turbo()},
          {"scale_factor", e.scale_factor()},
          {"supported_sizes", sizes},
          {"defaults", {{"size", size_str(d.width, d.height)}, {"steps", d.steps}, {"guidance_scale", d.cfg}}},
          {"memory", memory_json(e.info())},
          {"prompt_enhancer", e.info().pe_loaded},
          {"samplers", {"euler", "dpmpp_2m", "unipc"}},
          {"lora_list", loras},
          {"model_limits",
           {{"scale_factor", l.scale_factor}, {"latent_channels", l.latent_channels}, {"turbo", l.turbo},
            {"max_side", l.max_side}, {"max_pixels", l.max_pixels}, {"max_steps", l.max_steps},
            {"max_images", l.max_images}, {"shift", l.shift}}}};
}

}  // namespace ernie::server
