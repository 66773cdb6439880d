// libFuzzer target: the A1111 web API's parsers (server/a1111.h) on arbitrary bytes. The first byte picks one: a
// txt2img or img2img body, a png-info body, an infotext, an options body, or an Authorization header. Errors must
// be ApiExceptions (422 or 400 with a message); anything else, or a crash, is a finding. A body that parses keeps
// its invariants: batch_size x n_iter images, a sampler name that parses back, an error body that serializes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/a1111.h"
#include "server/api_error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ernie::server;
  if (size == 0) return 0;
  const std::string in(reinterpret_cast<const char*>(data) + 1, size - 1);
  ParseLimits lim;
  lim.max_image_pixels = 1 << 16;  // small images only: the fuzzer explores the parsers, not the codecs' speed
  try {
    switch (data[0] % 6) {
      case 0:
      case 1: {
        const a1111::Request a = a1111::parse_request(in, data[0] % 6 == 1, lim);
        if (a.parsed.req.num_images != a.batch_size * a.n_iter) __builtin_trap();
        if (a1111::parse_sampler_name(a.sampler_name) != a.parsed.req.sampler) __builtin_trap();
        if (a.parsed.req.prompt.empty()) __builtin_trap();
        break;
      }
      case 2:
        (void)a1111::png_info(in, lim).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        break;
      case 3:
        (void)a1111::parse_infotext(in).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        break;
      case 4:
        a1111::check_options(in, "tiny");
        break;
      default:
        (void)a1111::authorized(1, in, "sekrit");
        break;
    }
  } catch (const ApiException& e) {
    if (e.error.message.empty() || (e.error.status != 422 && e.error.status != 400)) __builtin_trap();
    (void)a1111::error_json(e.error).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return 0;
}
