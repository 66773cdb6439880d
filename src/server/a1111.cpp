#include "server/a1111.h"

#include <algorithm>
#include <charconv>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <set>

#include "core/error.h"
#include "engine/metadata.h"
#include "engine/noise.h"
#include "io/image_codec.h"
#include "server/form_data.h"
#include "server/http_head.h"

namespace ernie::server::a1111 {
namespace {
using nlohmann::json;
using std::to_string;

[[noreturn]] void invalid(const std::string& field, const std::string& msg, const std::string& code = "value_error") {
  throw ApiException{ApiError{422, msg, "invalid_request_error", field, code}};
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

int64_t get_int(const json& v, const std::string& f, int64_t lo, int64_t hi) {
  // FastAPI takes a whole float (512.0) for an int field; so do we.
  double d = 0;
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi)) d = double(hi) + 1;
    else d = double(v.get<int64_t>());
  } else if (v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>())) {
    d = v.get<double>();
  } else {
    invalid(f, f + " must be an integer, not " + (v.is_number() ? "a fractional number" : std::string(v.type_name())),
            "type_error.integer");
  }
  if (d < double(lo) || d > double(hi))
    invalid(f, f + " " + v.dump() + " is out of range [" + to_string(lo) + ", " + to_string(hi) + "]");
  return int64_t(d);
}

double get_number(const json& v, const std::string& f, double lo, double hi, bool lo_open = false) {
  if (!v.is_number()) invalid(f, f + " must be a number, not " + std::string(v.type_name()), "type_error.float");
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || (lo_open && d == lo) || d > hi)
    invalid(f, f + " " + v.dump() + " is out of range " + (lo_open ? "(" : "[") + to_string(lo).substr(0, 4) + ", " +
                   to_string(hi).substr(0, 5) + "]");
  return d;
}

std::string get_string(const json& v, const std::string& f, size_t max_bytes) {
  if (!v.is_string()) invalid(f, f + " must be a string, not " + std::string(v.type_name()), "type_error.str");
  const std::string& s = v.get_ref<const std::string&>();
  if (s.size() > max_bytes)
    invalid(f, f + " is " + to_string(s.size()) + " bytes long; the limit is " + to_string(max_bytes));
  if (s.find('\0') != std::string::npos) invalid(f, f + " contains a NUL character");
  return s;
}

// True when `v` is a value that asks for nothing (null, false, 0, "", "None", [], {}).
bool is_off(const json& v) {
  if (v.is_null()) return true;
  if (v.is_boolean()) return !v.get<bool>();
  if (v.is_number()) return v.get<double>() == 0;
  if (v.is_string()) return v.get_ref<const std::string&>().empty() || v.get_ref<const std::string&>() == "None";
  return v.empty();
}

json parse_body(const std::string& body, const ParseLimits& lim) {
  if (body.empty()) invalid("", "request body is empty; send a JSON object", "value_error.missing");
  if (nests_deeper_than(body, lim.max_nesting))  // bounded before parsing, as the OpenAI routes
    invalid("", "request body nests deeper than " + to_string(lim.max_nesting) + " levels", "value_error.jsondecode");
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    invalid("", std::string("request body is not valid JSON: ") + e.what(), "value_error.jsondecode");
  }
  if (!j.is_object()) invalid("", "request body must be a JSON object, not " + std::string(j.type_name()), "type_error.dict");
  return j;
}

struct SamplerName {
  const char* name;
  SamplerKind kind;
  std::vector<std::string> aliases;
};
const std::vector<SamplerName>& sampler_table() {
  static const std::vector<SamplerName> t = {{"Euler", SamplerKind::Euler, {"euler", "k_euler"}},
                                             {"DPM++ 2M", SamplerKind::DpmPP2M, {"dpmpp_2m", "k_dpmpp_2m"}},
                                             {"UniPC", SamplerKind::UniPC, {"unipc", "uni_pc"}}};
  return t;
}

// What the engine cannot do and would change the image: refused, naming the field.
void refuse_unsupported(const json& j) {
  static const std::vector<std::pair<const char*, const char*>> refused = {
      {"enable_hr", "the hires. fix second pass is not supported; generate at the final size instead"},
      {"restore_faces", "face restoration is not supported"},
      {"tiling", "tileable images are not supported"},
      {"styles", "saved prompt styles are not supported; put the text in the prompt"},
      {"subseed_strength", "variation seeds (subseed_strength) are not supported"},
      {"script_name", "A1111 scripts are not supported"},
      {"alwayson_scripts", "A1111 extensions (alwayson_scripts) are not supported"},
      {"inpainting_mask_invert", "an inverted mask is not supported; invert the mask image"},
      {"refiner_checkpoint", "a refiner model is not supported"},
      {"firstpass_image", "the hires. fix first-pass image is not supported"}};
  for (const auto& [k, why] : refused) {
    auto it = j.find(k);
    if (it == j.end() || is_off(*it)) continue;
    if (std::string(k) == "refiner_checkpoint" || std::string(k) == "script_name") {
      if (it->is_string() && (lower(it->get<std::string>()) == "none")) continue;
    }
    invalid(k, std::string(k) + ": " + why, "value_error.unsupported");
  }
}

// The A1111 name of one of our ApiException params (errors of the shared OpenAI parser).
std::string a1111_field(const std::string& ours) {
  if (ours == "image") return "init_images";
  if (ours == "strength") return "denoising_strength";
  if (ours == "guidance_scale") return "cfg_scale";
  if (ours == "n") return "batch_size";
  if (ours == "sampler") return "sampler_name";
  return ours;
}

// A float field as the decimal the client wrote (0.6, not 0.6000000238418579): its shortest form, read as a double.
double decimal(float f) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, f);
  return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}

std::string timestamp(int64_t unix_s) {
  std::time_t t = std::time_t(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d%H%M%S", &tm);
  return buf;
}

}  // namespace

SamplerKind parse_sampler_name(const std::string& name) {
  const std::string l = lower(name);
  for (const SamplerName& s : sampler_table()) {
    if (l == lower(s.name)) return s.kind;
    for (const std::string& a : s.aliases)
      if (l == a) return s.kind;
  }
  invalid("sampler_name", "sampler_name '" + name.substr(0, 40) +
                              "' is not a sampler this engine has; choose one of Euler, DPM++ 2M, UniPC");
}

std::string parse_scheduler(const std::string& name) {
  const std::string l = lower(name);
  if (l == "automatic" || l == "flowmatch") return "automatic";
  invalid("scheduler", "scheduler '" + name.substr(0, 40) +
                           "' is not one this engine has; choose Automatic (the model's flow-matching schedule)");
}

Request parse_request(const std::string& body, bool img2img, const ParseLimits& lim) {
  const json j = parse_body(body, lim);
  refuse_unsupported(j);
  Request a;
  a.parameters = j;
  json o = json::object();  // the same request in our OpenAI-style body (request_parse.h checks the rest)
  int width = 0, height = 0;
  std::string sampler = "Euler";
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    if (v.is_null()) continue;  // FastAPI: null is the default
    if (k == "prompt" || k == "negative_prompt") {
      o[k] = get_string(v, k, lim.max_prompt_bytes);
    } else if (k == "steps") {
      o["steps"] = get_int(v, k, 1, lim.max_steps);
    } else if (k == "cfg_scale") {
      o["guidance_scale"] = get_number(v, k, 0, lim.max_guidance);
    } else if (k == "width" || k == "height") {
      (k == "width" ? width : height) = int(get_int(v, k, 1, lim.max_side));
    } else if (k == "seed") {
      if (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() == -1) continue;
      if (!v.is_number_unsigned() && !(v.is_number_float() && v.get<double>() == -1.0))
        invalid(k, "seed must be -1 (random) or an integer from 0 to 18446744073709551615, not " + v.dump().substr(0, 40));
      if (v.is_number_unsigned()) o["seed"] = v.get<uint64_t>();
    } else if (k == "batch_size") {
      a.batch_size = int(get_int(v, k, 1, lim.max_images));
    } else if (k == "n_iter") {
      a.n_iter = int(get_int(v, k, 1, lim.max_images));
    } else if (k == "sampler_name" || (k == "sampler_index" && !j.contains("sampler_name"))) {
      sampler = get_string(v, k, 64);
    } else if (k == "scheduler") {
      a.scheduler = parse_scheduler(get_string(v, k, 64));
    } else if (k == "override_settings") {
      if (!v.is_object()) invalid(k, "override_settings must be an object, not " + std::string(v.type_name()), "type_error.dict");
    } else if (img2img && k == "init_images") {
      if (!v.is_array()) invalid(k, "init_images must be an array of base64 images, not " + std::string(v.type_name()), "type_error.list");
      if (v.empty()) continue;
      if (v.size() > 1) invalid(k, "init_images holds " + to_string(v.size()) + " images; this engine takes one");
      if (!v[0].is_string()) invalid(k, "init_images[0] must be a base64 image string, not " + std::string(v[0].type_name()), "type_error.str");
      o["image"] = v[0];
    } else if (img2img && k == "mask") {
      if (!v.is_string()) invalid(k, "mask must be a base64 image string, not " + std::string(v.type_name()), "type_error.str");
      if (!v.get_ref<const std::string&>().empty()) o["mask"] = v;
    } else if (img2img && k == "denoising_strength") {
      o["strength"] = get_number(v, k, 0, 1, true);
    } else if (img2img && k == "mask_blur") {
      o["mask_blur"] = get_int(v, k, 0, 256);
    }
    // Everything else A1111 has is ignored here: it has no meaning for this engine (eta, s_churn, clip_skip,
    // save_images, send_images, do_not_save_*, resize_mode (the init image is resized to width x height),
    // inpaint_full_res, inpainting_fill, ...), or is refused above when it would change the image.
  }
  if (!o.contains("prompt")) o["prompt"] = "";  // A1111's default
  if (o["prompt"].get_ref<const std::string&>().find_first_not_of(" \t\r\n") == std::string::npos)
    invalid("prompt", "prompt must not be empty: this model needs text to draw", "value_error.missing");
  const SamplerKind kind = parse_sampler_name(sampler);
  if (a.scheduler.empty()) a.scheduler = "automatic";
  a.sampler_name = sampler_a1111(kind);
  o["sampler"] = sampler_id(kind);
  if (int64_t(a.batch_size) * a.n_iter > lim.max_images)
    invalid("n_iter", "batch_size x n_iter is " + to_string(a.batch_size * a.n_iter) + " images; at most " +
                          to_string(lim.max_images) + " a request");
  o["n"] = a.batch_size * a.n_iter;
  if (img2img) {
    if (!o.contains("image")) invalid("init_images", "init_images is required: the image to start from, base64", "value_error.missing");
    if (!o.contains("strength")) o["strength"] = 0.75;  // A1111's default
    o["resize"] = true;  // A1111 resizes the init image (and mask) to width x height
    if (o.contains("mask")) o["composite"] = true;  // and pastes the unmasked pixels back
  }
  try {
    a.parsed = parse_generation_request(o.dump(), lim, img2img);
  } catch (ApiException& e) {  // an image that does not decode, ...: named as A1111 names it
    e.error.param = a1111_field(e.error.param);
    if (e.error.status == 400) e.error.status = 422;
    throw;
  }
  a.parsed.req.width = width;  // 0: the model's default, or the init image's size
  a.parsed.req.height = height;
  return a;
}

json response(const Request& a, const GenerateRequest& r, const std::vector<std::string>& pngs,
              const std::string& model_name, int64_t created_unix) {
  json images = json::array(), seeds = json::array(), subseeds = json::array(), infotexts = json::array();
  for (size_t i = 0; i < pngs.size(); ++i) {
    images.push_back(base64_encode(pngs[i]));
    seeds.push_back(image_seed(r.seed, int(i), r.rng));
    subseeds.push_back(image_seed(r.seed, int(i), r.rng));
    const PngImage p = decode_png(std::vector<uint8_t>(pngs[i].begin(), pngs[i].end()), "output");
    auto t = p.text.find("parameters");
    infotexts.push_back(t == p.text.end() ? std::string() : t->second);
  }
  const int n = int(pngs.size());
  json params = a.parameters;
  params["prompt"] = r.prompt;
  params["negative_prompt"] = r.negative_prompt;
  if (!params.contains("seed") || params["seed"].is_null()) params["seed"] = -1;
  params["steps"] = r.steps;
  params["cfg_scale"] = decimal(r.cfg);
  params["width"] = r.width;
  params["height"] = r.height;
  params["sampler_name"] = a.sampler_name;
  params["scheduler"] = a.scheduler;
  params["batch_size"] = a.batch_size;
  params["n_iter"] = a.n_iter;
  if (r.init_image) {
    params["denoising_strength"] = decimal(r.strength);
    params["init_images"] = nullptr;  // as A1111: the images are not echoed
    params["mask"] = nullptr;
  }
  json info = {{"prompt", r.prompt},
               {"all_prompts", json::array()},
               {"negative_prompt", r.negative_prompt},
               {"all_negative_prompts", json::array()},
               {"seed", image_seed(r.seed, 0, r.rng)},
               {"all_seeds", seeds},
               {"subseed", image_seed(r.seed, 0, r.rng)},
               {"all_subseeds", subseeds},
               {"subseed_strength", 0},
               {"width", r.width},
               {"height", r.height},
               {"sampler_name", a.sampler_name},
               {"cfg_scale", decimal(r.cfg)},
               {"steps", r.steps},
               {"batch_size", a.batch_size},
               {"restore_faces", false},
               {"face_restoration_model", nullptr},
               {"sd_model_name", model_name},
               {"sd_model_hash", nullptr},
               {"sd_vae_name", nullptr},
               {"sd_vae_hash", nullptr},
               {"seed_resize_from_w", -1},
               {"seed_resize_from_h", -1},
               {"denoising_strength", r.init_image ? json(decimal(r.strength)) : json(nullptr)},
               {"extra_generation_params", {{"Schedule type", "FlowMatch"}}},
               {"index_of_first_image", 0},
               {"infotexts", infotexts},
               {"styles", json::array()},
               {"job_timestamp", timestamp(created_unix)},
               {"clip_skip", 1},
               {"is_using_inpainting_conditioning", false},
               {"version", engine_version()}};
  for (int i = 0; i < n; ++i) {
    info["all_prompts"].push_back(r.prompt);
    info["all_negative_prompts"].push_back(r.negative_prompt);
  }
  return {{"images", std::move(images)}, {"parameters", std::move(params)}, {"info", info.dump()}};
}

json parse_infotext(const std::string& text) {
  json res = json::object();
  // Lines: the prompt, then "Negative prompt: ..." (may span lines), then the last line of "Key: value" pairs.
  std::vector<std::string> lines;
  size_t start = 0;
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
  while (start <= t.size()) {
    size_t e = t.find('\n', start);
    if (e == std::string::npos) e = t.size();
    lines.push_back(t.substr(start, e - start));
    start = e + 1;
  }
  // The pairs of a line: KEY: VALUE, ... where VALUE is "quoted" (with \" escapes) or runs to the next comma.
  auto pairs_of = [](const std::string& l) {
    std::vector<std::pair<std::string, std::string>> out;
    size_t i = 0;
    while (i < l.size()) {
      while (i < l.size() && l[i] == ' ') ++i;
      const size_t colon = l.find(':', i), next = std::min(l.find(',', i), l.size());
      if (colon == std::string::npos || colon == i || colon > next) {  // a piece without a key (as A1111, skipped)
        if (next == l.size()) break;
        i = next + 1;
        continue;
      }
      std::string key = l.substr(i, colon - i);
      i = colon + 1;
      while (i < l.size() && l[i] == ' ') ++i;
      std::string val;
      if (i < l.size() && l[i] == '"') {
        ++i;
        bool closed = false;
        while (i < l.size()) {
          if (l[i] == '\\' && i + 1 < l.size()) {
            val += l[i + 1];
            i += 2;
          } else if (l[i] == '"') {
            ++i;
            closed = true;
            break;
          } else {
            val += l[i++];
          }
        }
        if (!closed) return std::vector<std::pair<std::string, std::string>>{};
        while (i < l.size() && l[i] == ' ') ++i;
        if (i < l.size() && l[i] != ',') return std::vector<std::pair<std::string, std::string>>{};
      } else {
        const size_t comma = std::min(l.find(',', i), l.size());
        val = l.substr(i, comma - i);
        while (!val.empty() && val.back() == ' ') val.pop_back();
        i = comma;
      }
      if (i < l.size()) ++i;  // the comma
      out.emplace_back(std::move(key), std::move(val));
    }
    return out;
  };
  std::vector<std::pair<std::string, std::string>> pairs;
  if (!lines.empty()) {
    pairs = pairs_of(lines.back());
    if (pairs.size() >= 3) lines.pop_back();
    else pairs.clear();
  }
  std::string prompt, negative;
  bool in_negative = false;
  for (const std::string& l : lines) {
    if (!in_negative && l.rfind("Negative prompt:", 0) == 0) {
      in_negative = true;
      negative = l.substr(16);
      if (!negative.empty() && negative[0] == ' ') negative.erase(0, 1);
    } else if (in_negative) {
      negative += "\n" + l;
    } else {
      prompt += (prompt.empty() ? "" : "\n") + l;
    }
  }
  res["Prompt"] = prompt;
  res["Negative prompt"] = negative;
  for (auto& [k, v] : pairs) {
    const size_t x = v.find('x');
    if (x != std::string::npos && x > 0 && x + 1 < v.size() &&
        v.find_first_not_of("0123456789") == x && v.find_first_not_of("0123456789", x + 1) == std::string::npos) {
      res[k + "-1"] = v.substr(0, x);  // A1111 splits WxH values
      res[k + "-2"] = v.substr(x + 1);
    } else {
      res[k] = v;
    }
  }
  return res;
}

json png_info(const std::string& body, const ParseLimits& lim) {
  const json j = parse_body(body, lim);
  auto it = j.find("image");
  if (it == j.end() || it->is_null()) invalid("image", "image is required: a base64 PNG, JPEG or WebP", "value_error.missing");
  if (!it->is_string()) invalid("image", "image must be a base64 image string, not " + std::string(it->type_name()), "type_error.str");
  if (it->get_ref<const std::string&>().empty()) invalid("image", "image is empty");
  const std::string bytes = base64_decode(it->get_ref<const std::string&>(), "image");
  PngImage p;
  try {
    p = decode_image(std::vector<uint8_t>(bytes.begin(), bytes.end()), "image", uint64_t(lim.max_image_pixels));
  } catch (const Error& e) {
    invalid("image", e.what(), "value_error.image");
  }
  json items = json::object();
  std::string info;
  for (const auto& [k, v] : p.text) {
    if (k == "parameters") info = v;
    else items[k] = v;
  }
  return {{"info", info}, {"items", items}, {"parameters", info.empty() ? json::object() : parse_infotext(info)}};
}

json sd_models(const std::string& model_name, const std::string& model_dir) {
  return json::array({{{"title", model_name},
                       {"model_name", model_name},
                       {"hash", nullptr},
                       {"sha256", nullptr},
                       {"filename", model_dir},
                       {"config", nullptr}}});
}

json samplers() {
  json out = json::array();
  for (const SamplerName& s : sampler_table())
    out.push_back({{"name", s.name}, {"aliases", s.aliases}, {"options", json::object()}});
  return out;
}

json schedulers() {
  return json::array({{{"name", "automatic"},
                       {"label", "Automatic"},
                       {"aliases", json::array({"FlowMatch"})},
                       {"default_rho", -1},
                       {"need_inner_model", false}}});
}

json upscalers() {
  return json::array(
      {{{"name", "None"}, {"model_name", nullptr}, {"model_path", nullptr}, {"model_url", nullptr}, {"scale", 1}}});
}

json latent_upscale_modes() { return json::array(); }
json sd_vae() { return json::array(); }

json loras(const std::vector<LoraLibrary::Available>& available, const std::string& lora_dir) {
  json out = json::array();
  for (const LoraLibrary::Available& l : available)
    out.push_back({{"name", l.name},
                   {"alias", l.name},
                   {"path", lora_dir.empty() ? l.name + ".safetensors" : lora_dir + "/" + l.name + ".safetensors"},
                   {"metadata", json::object()}});
  return out;
}

json options(const std::string& model_name) {
  return {{"sd_model_checkpoint", model_name},
          {"sd_checkpoint_hash", nullptr},
          {"sd_vae", "Automatic"},
          {"CLIP_stop_at_last_layers", 1},
          {"samples_format", "png"},
          {"eta_noise_seed_delta", 0},
          {"randn_source", "CPU"}};
}

void check_options(const std::string& body, const std::string& model_name) {
  const json j = parse_body(body, ParseLimits{});
  auto it = j.find("sd_model_checkpoint");
  if (it == j.end() || it->is_null()) return;
  const std::string m = get_string(*it, "sd_model_checkpoint", 4096);
  // A1111's titles carry " [hash]"; the name before it must be ours.
  const std::string base = m.substr(0, m.find(" ["));
  if (base != model_name)
    invalid("sd_model_checkpoint", "sd_model_checkpoint '" + m.substr(0, 80) + "' is not served here: this server has one model, '" +
                                       model_name + "'");
}

json progress(const json& running, int job_count) {
  int step = 0, total = 0;
  std::string job;
  if (running.is_object()) {
    step = running.value("step", 0);
    total = running.value("total", 0);
    job = running.value("id", "");
  }
  const double p = total > 0 ? double(step) / total : 0.0;
  return {{"progress", p},
          {"eta_relative", 0.0},
          {"state",
           {{"skipped", false},
            {"interrupted", false},
            {"job", job},
            {"job_count", job_count},
            {"job_timestamp", "0"},
            {"job_no", 0},
            {"sampling_step", step},
            {"sampling_steps", total}}},
          {"current_image", nullptr},
          {"textinfo", nullptr}};
}

bool authorized(int fields, const std::string& h, const std::string& key) {
  if (key.empty()) return true;
  if (bearer_matches(fields, h, key)) return true;
  if (fields != 1 || h.size() < 6 || lower(h.substr(0, 5)) != "basic" || h[5] != ' ') return false;
  std::string_view b64(h);
  b64.remove_prefix(6);
  while (!b64.empty() && b64.front() == ' ') b64.remove_prefix(1);
  std::string cred;
  try {
    cred = base64_decode(b64, "Authorization");
  } catch (const ApiException&) {
    return false;
  }
  const size_t colon = cred.find(':');
  if (colon == std::string::npos) return false;
  return key_equals(std::string_view(cred).substr(colon + 1), key);
}

json error_json(const ApiError& e) {
  if (e.status == 422)
    return {{"detail", json::array({{{"loc", e.param.empty() ? json::array({"body"}) : json::array({"body", e.param})},
                                     {"msg", e.message},
                                     {"type", e.code.empty() ? "value_error" : e.code}}})}};
  return {{"error", e.code.empty() ? e.type : e.code}, {"detail", e.message}, {"errors", e.message}};
}

}  // namespace ernie::server::a1111
