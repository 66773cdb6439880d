#include "engine/metadata.h"

#include <filesystem>

#include "core/error.h"
#include "core/float_text.h"
#include "core/json.h"
#include "io/configs.h"

namespace ernie {

ImageMeta image_meta(const GenerateResult& res, int k, const std::string& model, std::optional<uint64_t> seed) {
  if (seed) *seed = image_seed(*seed, k, res.resolved.rng);
  return {res.resolved, res.revised_prompt, model, seed, k, int(res.images.size()), res.vae_tiled, res.dit_weights,
          res.attention_fp8};
}

std::string engine_version() { return std::string("ernie-image ") + ERNIE_VERSION; }

std::string a1111_parameters(const ImageMeta& m) {
  const GenerateRequest& r = m.request;
  std::string s = r.prompt;
  if (!r.negative_prompt.empty()) s += "\nNegative prompt: " + r.negative_prompt;
  s += "\nSteps: " + std::to_string(r.steps) + ", Sampler: " + sampler_a1111(r.sampler) +
       ", Schedule type: FlowMatch, CFG scale: " + shortest_decimal(r.cfg);
  if (m.seed) s += ", Seed: " + std::to_string(*m.seed);
  s += ", Size: " + std::to_string(r.width) + "x" + std::to_string(r.height);
  if (!m.model.empty()) s += ", Model: " + m.model;
  if (!r.loras.empty()) {  // A1111's list of the adapters' short hashes, by name
    std::string list;
    for (const LoraRef& l : r.loras) list += (list.empty() ? "" : ", ") + l.name + ": " + l.hash;
    s += ", Lora hashes: \"" + list + "\"";
  }
  if (r.shift > 0) s += ", Shift: " + shortest_decimal(r.shift);
  if (r.init_image) s += ", Denoising strength: " + shortest_decimal(r.strength);  // A1111's img2img fields
  if (r.mask && r.mask_blur > 0) s += ", Mask blur: " + std::to_string(r.mask_blur);
  if (r.mask) s += std::string(", Inpaint: true") + (r.composite ? ", Composite: true" : "");
  // A1111's RNG names: CPU (torch's CPU generator), NV (its twin of torch's CUDA generator)
  if (m.seed) s += std::string(", RNG: ") + (r.rng == NoiseRng::Cpu ? "CPU" : r.rng == NoiseRng::Cuda ? "NV" : "ernie");
  if (r.use_pe) s += ", Prompt enhancer: true";
  if (m.vae_tiled) s += ", VAE tiling: true";
  if (!m.dit_weights.empty()) s += ", DiT weights: " + m.dit_weights;
  if (m.attention_fp8) s += ", Attention: fp8";
  if (m.batch_size > 1) s += ", Batch size: " + std::to_string(m.batch_size) + ", Batch pos: " + std::to_string(m.batch_index);
  s += ", Version: " + engine_version();
  return s;
}

nlohmann::json meta_json(const ImageMeta& m) {
  const GenerateRequest& r = m.request;
  nlohmann::json j = {{"prompt", r.prompt},
                      {"negative_prompt", r.negative_prompt},
                      {"revised_prompt", m.revised_prompt},
                      {"width", r.width},
                      {"height", r.height},
                      {"steps", r.steps},
                      {"cfg", r.cfg},
                      {"seed", nullptr},
                      {"sampler", sampler_id(r.sampler)},
                      {"prompt_enhancer", r.use_pe},
                      {"batch_index", m.batch_index},
                      {"batch_size", m.batch_size},
                      {"model", m.model},
                      {"engine", engine_version()}};
  if (m.seed) j["seed"] = *m.seed;
  if (m.seed) j["rng"] = rng_name(r.rng);
  if (r.shift > 0) j["shift"] = r.shift;
  if (r.init_image) j["img2img"] = {{"strength", r.strength}, {"mask", r.mask.has_value()}, {"mask_blur", r.mask_blur},
                                    {"composite", r.composite}};
  if (m.vae_tiled) j["vae_tiled"] = true;
  if (!m.dit_weights.empty()) j["dit_weights"] = m.dit_weights;
  if (m.attention_fp8) j["attention"] = "fp8";
  for (const LoraRef& l : r.loras)
    j["loras"].push_back({{"name", l.name}, {"file", std::filesystem::path(l.path).filename().string()},
                          {"hash", l.hash}, {"scale", l.scale}, {"from_tag", l.from_tag}});
  return j;
}

std::vector<std::pair<std::string, std::string>> png_metadata(const ImageMeta& m) {
  return {{"parameters", a1111_parameters(m)}, {"ernie-image", meta_json(m).dump()}};
}

std::string model_display_name(const std::string& model_dir) {
  namespace fs = std::filesystem;
  try {
    nlohmann::json j = read_json_file((fs::path(model_dir) / "model_index.json").string());
    if (j.contains("_name_or_path") && j["_name_or_path"].is_string()) {
      std::string n = j["_name_or_path"].get<std::string>();
      if (!n.empty()) return n;
    }
  } catch (const Error&) {
  }
  fs::path p = fs::absolute(model_dir).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  return p.filename().string();
}

}  // namespace ernie
