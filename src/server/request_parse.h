// The JSON body of POST /v1/images/generations and POST /v1/jobs -> a GenerateRequest. OpenAI Images
// fields (prompt, n, size "WxH", response_format b64_json, model/user/quality/style accepted and ignored)
// plus ours (negative_prompt, steps, guidance_scale, seed, use_pe). Type and range errors throw
// ApiException (400) naming the field; model-specific checks (size a multiple of the scale factor, ...)
// are Engine::resolve's.
#pragma once
#include <string>

#include "engine/engine.h"

namespace ernie::server {

struct ParseLimits {
  int max_images = 8;               // n
  size_t max_prompt_bytes = 16384;  // prompt and negative_prompt, each
  int max_side = 4096;              // pixels, each side of size
  int max_steps = 1000;
  float max_guidance = 100.0f;
  int max_nesting = 16;             // JSON depth
};

struct ParsedRequest {
  GenerateRequest req;
  bool seed_given = false;  // false: the server picks one
};

ParsedRequest parse_generation_request(const std::string& body, const ParseLimits& lim = {});

// "1024x768" -> (1024, 768); throws ApiException for anything else.
std::pair<int, int> parse_size(const std::string& s, int max_side);

}  // namespace ernie::server
