#include "server/request_parse.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "server/api_error.h"

namespace ernie::server {
namespace {
using nlohmann::json;
using std::to_string;

// Rejects deeply nested documents before parsing them (bounded work and stack for any body).
void check_nesting(const std::string& body, int max_depth) {
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
      if (++depth > max_depth)
        bad_request("request body nests deeper than " + to_string(max_depth) + " levels", "", "invalid_json");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
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

ParsedRequest parse_generation_request(const std::string& body, const ParseLimits& lim) {
  if (body.empty()) bad_request("request body is empty; send a JSON object with at least \"prompt\"", "", "invalid_json");
  check_nesting(body, lim.max_nesting);
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    bad_request(std::string("request body is not valid JSON: ") + e.what(), "", "invalid_json");
  }
  if (!j.is_object()) bad_request("request body must be a JSON object, not " + type_name(j), "", "invalid_json");

  static const std::set<std::string> ignored = {"model", "user", "quality", "style", "background", "moderation"};
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
      if (f == "url")
        bad_request("response_format 'url' is not supported by this server: use 'b64_json', or the jobs API "
                    "(POST /v1/jobs, then GET /v1/jobs/{id}/images/0 for the PNG)",
                    "response_format", "unsupported_response_format");
      if (f != "b64_json")
        bad_request("response_format '" + f.substr(0, 40) + "' is unknown; use 'b64_json'", "response_format");
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
    } else if (ignored.count(k)) {
      continue;  // OpenAI fields with no meaning here
    } else {
      bad_request("unknown field '" + k.substr(0, 64) +
                      "'; known: prompt, negative_prompt, n, size, response_format, steps, guidance_scale, seed, use_pe, "
                      "sampler, shift, rng, loras",
                  k.substr(0, 64), "unknown_field");
    }
  }
  if (!have_prompt) bad_request("prompt is required", "prompt", "missing_field");
  if (r.prompt.find_first_not_of(" \t\r\n") == std::string::npos)
    bad_request("prompt must not be empty", "prompt", "invalid_value");
  return out;
}

}  // namespace ernie::server
