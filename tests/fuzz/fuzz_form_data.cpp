// libFuzzer target: the bodies of POST /v1/images/edits and the image fields (server/form_data.h,
// server/request_parse.h) on arbitrary bytes. The first byte picks the parser: base64, the parts of a form
// (name NUL data NUL ..., as httplib's multipart parser hands them over), or a JSON body. Errors must be ApiExceptions (400s); anything else, or a
// crash, is a finding. What base64 decodes must encode back to the canonical form of its input, and every request
// that parses must survive the shared queue's transport form (server/request_json.h): it parses again, to the
// same form.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>
#include <algorithm>

#include "server/api_error.h"
#include "server/form_data.h"
#include "server/request_json.h"
#include "server/request_parse.h"

namespace {
// What an api node stores parses on the worker to the same request (a failure there is a finding).
void round_trip(const ernie::server::ParsedRequest& p, const ernie::server::ParseLimits& lim) {
  using namespace ernie::server;
  const auto dump = [](const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); };
  const std::string stored = dump(request_to_json(p));  // as SharedServer::submit stores it
  ParsedRequest q;
  try {
    q = parse_generation_request(stored, lim, p.req.init_image.has_value());
  } catch (const ApiException&) {
    __builtin_trap();
  }
  if (dump(request_to_json(q)) != stored) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ernie::server;
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  ParseLimits lim;
  lim.max_image_pixels = 1 << 16;  // small images only: the fuzzer explores the parsers, not libpng's speed
  try {
    switch (data[0] % 3) {
      case 0: {
        const std::string bytes = base64_decode(in, "image");
        if (in.substr(0, 5) != "data:" && base64_decode(base64_encode(bytes), "image") != bytes) __builtin_trap();
        break;
      }
      case 1: {  // name \0 data \0 name \0 data ...
        std::vector<FormPart> parts;
        size_t pos = 0;
        while (pos < in.size() && parts.size() < kMaxFormParts) {
          const size_t a = in.find('\0', pos);
          if (a == std::string_view::npos) break;
          const size_t b = std::min(in.find('\0', a + 1), in.size());
          parts.push_back({std::string(in.substr(pos, a - pos)), "", "", std::string(in.substr(a + 1, b - a - 1))});
          pos = b + 1;
        }
        round_trip(parse_edit_form(parts, lim), lim);
        break;
      }
      default:
        round_trip(parse_generation_request(std::string(in), lim, true), lim);
    }
  } catch (const ApiException&) {
  }
  return 0;
}
