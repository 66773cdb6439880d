#include "server/request_parse.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/init_image.h"
#include "io/image_codec.h"
#include "server/api_error.h"

namespace ernie::server {
namespace {
using nlohmann::json;
using std::to_string;

void check_nesting(const std::string& body, int max_depth) {
  if (nests_deeper_than(body, max_depth))
    bad_request("request body nests deeper than " + to_string(max_depth) + " levels", "", "invalid_json");
}

std::string type_name(const json& v) { return v.type_name(); }

std::string get_string(const json& v, const char* field, size_t max_bytes) {
  if (!v.is_string()) bad_request(std::string(field) + " must be a string, not " + type_name(v), field);
  const auto& s = v.get_ref<const std::string&>();
  if (s.size() > max_bytes)
    bad_request(std::string(field) + " is " + to_string(s.size()) + " bytes long; the limit is " + to_string(max_bytes),
                field);
  if (s.find('\0') != std::string::npos) bad_request(std::string(field) + " contains a NUL character", field);
  return s;
}

int64_t get_int(const json& v, const char* field, int64_t lo, int64_t hi) {
  if (!v.is_number_integer())
    bad_request(std::string(field) + " must be an integer, not " +
                    (v.is_number_float() ? "a fractional number" : type_name(v)),
                field);
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi))
    bad_request(std::string(field) + " " + v.dump() + " is out of range [" + to_string(lo) + ", " + to_string(hi) + "]",
                field);
  int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    bad_request(std::string(field) + " " + to_string(x) + " is out of range [" + to_string(lo) + ", " + to_string(hi) + "]",
                field);
  return x;
}

}  // namespace

bool nests_deeper_than(const std::string& body, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

std::pair<int, int> parse_size(const std::string& s, int max_side) {
  auto fail = [&](const std::string& why) {
    bad_request("size '" + s.substr(0, 40) + "' " + why, "size", "invalid_size");
  };
  size_t x = s.find('x');
  if (x == std::string::npos || x == 0 || x + 1 == s.size()) fail("must look like WIDTHxHEIGHT, e.g. \"1024x1024\"");
  int side[2];
  std::string parts[2] = {s.substr(0, x), s.substr(x + 1)};
  for (int i = 0; i < 2; ++i) {
    if (parts[i].size() > 6) fail("is far too large");
    for (char c : parts[i])
      if (c < '0' || c > '9') fail("must look like WIDTHxHEIGHT with positive whole numbers, e.g. \"1024x1024\"");
    side[i] = std::stoi(parts[i]);
    if (side[i] <= 0) fail("must have positive sides");
    if (side[i] > max_side) fail("is too large: at most " + to_string(max_side) + " pixels a side");
  }
  return {side[0], side[1]};
}

Image decode_image_field(const std::string& bytes, const char* field, const ParseLimits& lim) {
  const std::string f(field);
  try {  // PNG, JPEG or WebP by content; the size is checked in the header, before anything is decoded
    PngImage p = decode_image(std::vector<uint8_t>(bytes.begin(), bytes.end()), f, uint64_t(lim.max_image_pixels));
    return Image{p.width, p.height, std::move(p.rgb), std::move(p.alpha)};
  } catch (const Error& e) {
    bad_request(e.what(), f, "invalid_image");
  }
}

std::string encode_output(const std::string& png, const OutputFormat& o) {
  if (o.format == ImageFormat::Png) return png;
  const PngImage p = decode_png(std::vector<uint8_t>(png.begin(), png.end()), "output");
  const std::vector<std::pair<std::string, std::string>> text(p.text.begin(), p.text.end());
  const std::vector<uint8_t> b = encode_image(o.format, p.width, p.height, p.rgb, text, o.quality);
  return std::string(b.begin(), b.end());
}

namespace {
ParsedRequest parse_object(const json& j, const ParseLimits& lim, bool require_image);
}  // namespace

ParsedRequest parse_generation_request(const std::string& body, const ParseLimits& lim, bool require_image) {
  if (body.empty()) bad_request("request body is empty; send a JSON object with at least \"prompt\"", "", "invalid_json");
  check_nesting(body, lim.max_nesting);
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    bad_request(std::string("request body is not valid JSON: ") + e.what(), "", "invalid_json");
  }
  if (!j.is_object()) bad_request("request body must be a JSON object, not " + type_name(j), "", "invalid_json");
  return parse_object(j, lim, require_image);
}

ParsedRequest parse_edit_form(const std::vector<FormPart>& parts, const ParseLimits& lim) {
  // Form fields are text: those the JSON body types as numbers, booleans or arrays are read as JSON (a
  // value that does not parse stays a string, so the usual type error names the field).
  static const std::set<std::string> typed = {"n", "steps", "guidance_scale", "seed", "strength", "mask_blur",
                                              "shift", "use_pe", "composite", "resize", "loras",
                                              "output_compression"};
  json j = json::object();
  std::string image, mask;
  bool have_image = false, have_mask = false;
  for (const FormPart& p : parts) {
    const std::string field = p.name == "image[]" ? "image" : p.name;
    if (field == "image" || field == "mask") {
      bool& have = field == "image" ? have_image : have_mask;
      if (have) bad_request("more than one " + field + " part; this model edits one image", field, "invalid_value");
      have = true;
      (field == "image" ? image : mask) = p.data;
      continue;
    }
    if (j.contains(field)) bad_request("field '" + field.substr(0, 64) + "' appears twice", field.substr(0, 64));
    if (p.data.size() > lim.max_prompt_bytes + 64)
      bad_request("field '" + field.substr(0, 64) + "' is " + to_string(p.data.size()) + " bytes long", field.substr(0, 64));
    json v = p.data;
    if (typed.count(field)) {
      check_nesting(p.data, lim.max_nesting);
      json parsed = json::parse(p.data, nullptr, false);
      if (!parsed.is_discarded()) v = std::move(parsed);
    }
    j[field] = std::move(v);
  }
  if (!have_image) bad_request("image is required: the PNG to edit, as a file part named 'image'", "image", "missing_field");
  ParsedRequest out = parse_object(j, lim, false);
  out.req.init_image = decode_image_field(image, "image", lim);
  if (have_mask) out.req.mask = decode_image_field(mask, "mask", lim);
  return out;
}

namespace {
ParsedRequest parse_object(const json& j, const ParseLimits& lim, bool require_image) {

  static const std::set<std::string> ignored = {"model", "user", "quality", "style", "moderation"};
  ParsedRequest out;
  GenerateRequest& r = out.req;
  bool have_prompt = false;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    if (k == "prompt") {
      r.prompt = get_string(v, "prompt", lim.max_prompt_bytes);
      have_prompt = true;
    } else if (k == "negative_prompt") {
      if (!v.is_null()) r.negative_prompt = get_string(v, "negative_prompt", lim.max_prompt_bytes);
    } else if (k == "n") {
      if (!v.is_null()) r.num_images = int(get_int(v, "n", 1, lim.max_images));
    } else if (k == "size") {
      if (v.is_null()) continue;
      std::string s = get_string(v, "size", 64);
      if (s == "auto") continue;
      auto [w, h] = parse_size(s, lim.max_side);
      r.width = w;
      r.height = h;
    } else if (k == "response_format") {
      if (v.is_null()) continue;
      std::string f = get_string(v, "response_format", 64);
      if (f != "b64_json" && f != "url")
        bad_request("response_format '" + f.substr(0, 40) + "' is unknown; use 'b64_json' or 'url'", "response_format");
      out.url = f == "url";
    } else if (k == "output_format") {  // gpt-image-1's
      if (v.is_null()) continue;
      const std::string f = get_string(v, "output_format", 64);
      const auto fmt = image_format_named(f);
      if (!fmt || f == "jpg")
        bad_request("output_format '" + f.substr(0, 40) + "' is unknown; use 'png', 'jpeg' or 'webp'", "output_format");
      out.output.format = *fmt;
    } else if (k == "output_compression") {  // JPEG and WebP quality, 100 the best (OpenAI's default)
      if (!v.is_null()) out.output.quality = std::max(1, int(get_int(v, "output_compression", 0, 100)));
    } else if (k == "background") {
      if (v.is_null()) continue;
      const std::string b = get_string(v, "background", 64);
      if (b == "transparent")
        bad_request("background 'transparent' is not supported: this model paints every pixel; use 'auto' or 'opaque'",
                    "background", "invalid_value");
      if (b != "auto" && b != "opaque")
        bad_request("background '" + b.substr(0, 40) + "' is unknown; use 'auto' or 'opaque'", "background");
    } else if (k == "steps") {
      if (!v.is_null()) r.steps = int(get_int(v, "steps", 1, lim.max_steps));
    } else if (k == "guidance_scale") {
      if (v.is_null()) continue;
      if (!v.is_number()) bad_request("guidance_scale must be a number, not " + type_name(v), "guidance_scale");
      double g = v.get<double>();
      if (!std::isfinite(g) || g < 0 || g > lim.max_guidance)
        bad_request("guidance_scale " + v.dump() + " is out of range [0, " + to_string(int(lim.max_guidance)) + "]",
                    "guidance_scale");
      r.cfg = float(g);
    } else if (k == "seed") {
      // -1 means random, as in the CLI, A1111 and stable-diffusion.cpp; else any 64-bit seed.
      if (v.is_null() || (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() == -1)) continue;
      if (!v.is_number_unsigned())
        bad_request("seed must be -1 (random) or an integer from 0 to 18446744073709551615, not " + v.dump(), "seed");
      r.seed = v.get<uint64_t>();
      out.seed_given = true;
    } else if (k == "use_pe") {
      if (v.is_null()) continue;
      if (!v.is_boolean()) bad_request("use_pe must be true or false, not " + type_name(v), "use_pe");
      r.use_pe = v.get<bool>();
    } else if (k == "sampler") {
      if (v.is_null()) continue;
      const std::string name = get_string(v, "sampler", 64);
      try {
        r.sampler = parse_sampler(name, "sampler");
      } catch (const Error& e) {
        bad_request(e.what(), "sampler");
      }
    } else if (k == "shift") {
      if (v.is_null()) continue;
      if (!v.is_number()) bad_request("shift must be a number, not " + type_name(v), "shift");
      const double sh = v.get<double>();
      if (!std::isfinite(sh) || sh <= 0 || sh > 1000)
        bad_request("shift " + v.dump() + " must be a positive number (at most 1000)", "shift");
      r.shift = float(sh);
    } else if (k == "rng") {
      if (v.is_null()) continue;
      const std::string name = get_string(v, "rng", 64);
      try {
        r.rng = parse_rng(name, "rng");
      } catch (const Error& e) {
        bad_request(e.what(), "rng");
      }
    } else if (k == "loras") {
      // [{"name": NAME, "scale": S}, ...]: files of the server's --lora-dir (never paths; the engine checks).
      if (v.is_null()) continue;
      if (!v.is_array()) bad_request("loras must be an array of {\"name\", \"scale\"} objects, not " + type_name(v), "loras");
      if (v.size() > 16) bad_request("loras lists " + to_string(v.size()) + " adapters; at most 16", "loras");
      for (const json& e : v) {
        if (!e.is_object()) bad_request("each of loras must be an object {\"name\", \"scale\"}, not " + type_name(e), "loras");
        LoraRef l;
        for (auto f = e.begin(); f != e.end(); ++f) {
          if (f.key() == "name") {
            l.name = get_string(f.value(), "loras[].name", 255);
          } else if (f.key() == "scale") {
            const json& sv = f.value();
            if (!sv.is_number()) bad_request("loras[].scale must be a number, not " + type_name(sv), "loras");
            const double sc = sv.get<double>();
            if (!std::isfinite(sc) || std::fabs(sc) > 16)
              bad_request("loras[].scale " + sv.dump() + " must be a number from -16 to 16", "loras");
            l.scale = float(sc);
          } else {
            bad_request("loras[]: unknown field '" + f.key().substr(0, 64) + "'; known: name, scale", "loras",
                        "unknown_field");
          }
        }
        if (l.name.empty()) bad_request("loras[].name is required", "loras", "missing_field");
        r.loras.push_back(l);
      }
    } else if (k == "image" || k == "mask") {  // base64 PNG, JPEG or WebP (or a data URL)
      if (v.is_null()) continue;
      if (!v.is_string()) bad_request(k + " must be a base64 image string (PNG, JPEG or WebP), not " + type_name(v), k);
      const std::string png = base64_decode(v.get_ref<const std::string&>(), k.c_str());
      (k == "image" ? r.init_image : r.mask) = decode_image_field(png, k.c_str(), lim);
    } else if (k == "strength") {
      if (v.is_null()) continue;
      if (!v.is_number()) bad_request("strength must be a number, not " + type_name(v), "strength");
      const double st = v.get<double>();
      if (!std::isfinite(st) || st <= 0 || st > 1) bad_request("strength " + v.dump() + " must be in (0, 1]", "strength");
      r.strength = float(st);
    } else if (k == "mask_blur") {
      if (!v.is_null()) r.mask_blur = int(get_int(v, "mask_blur", 0, kMaxMaskBlur));
    } else if (k == "composite" || k == "resize") {
      if (v.is_null()) continue;
      if (!v.is_boolean()) bad_request(k + " must be true or false, not " + type_name(v), k);
      (k == "composite" ? r.composite : r.resize) = v.get<bool>();
    } else if (ignored.count(k)) {
      continue;  // OpenAI fields with no meaning here
    } else {
      bad_request("unknown field '" + k.substr(0, 64) +
                      "'; known: prompt, negative_prompt, n, size, response_format, output_format, output_compression, "
                      "background, steps, guidance_scale, seed, use_pe, sampler, shift, rng, loras, image, mask, "
                      "strength, mask_blur, composite, resize",
                  k.substr(0, 64), "unknown_field");
    }
  }
  if (require_image && !r.init_image)
    bad_request("image is required: the PNG to edit, base64 (or a multipart file part named 'image')", "image",
                "missing_field");
  if (out.url && out.output.format != ImageFormat::Png)
    bad_request(std::string("output_format '") + image_format_name(out.output.format) +
                    "' comes as b64_json only (the files under /v1/files are PNGs)", "output_format", "invalid_value");
  if (!have_prompt) bad_request("prompt is required", "prompt", "missing_field");
  if (r.prompt.find_first_not_of(" \t\r\n") == std::string::npos)
    bad_request("prompt must not be empty", "prompt", "invalid_value");
  return out;
}
}  // namespace

}  // namespace ernie::server
