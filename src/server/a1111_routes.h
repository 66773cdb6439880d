// The AUTOMATIC1111 web API's routes, /sdapi/v1/*, over the job queue of the OpenAI routes (server.h): one call
// adds them to a server. The mapping itself is a1111.h's; docs/server.md describes the routes.
#pragma once
#include <cstddef>
#include <string>

#include "server/request_parse.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace ernie::server {

class JobQueue;

struct A1111Context {
  JobQueue& queue;            // txt2img and img2img are jobs of this queue; interrupt/skip cancel its running one
  std::string api_key;        // empty: no key; else Bearer KEY or HTTP Basic with KEY as the password
  ParseLimits limits;
  size_t max_body_bytes = size_t(16) << 20;
  std::string model_name;     // the one model, as sd-models and options name it
};

// GET sd-models, samplers, schedulers, upscalers, latent-upscale-modes, sd-vae, loras, progress, options;
// POST options, txt2img, img2img, interrupt, skip, png-info; OPTIONS on the image routes.
void register_a1111_routes(httplib::Server& s, const A1111Context& ctx);

}  // namespace ernie::server
