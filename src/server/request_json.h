// A request as the shared queue carries it (issue 27): the JSON body that parse_generation_request reads back
// to the same ParsedRequest. An api node parses whatever a client sent (JSON, or an edit's multipart form),
// draws the seed, and stores this form; the worker that takes the job parses it again and resolves it on its
// engine. The job records of both servers show the same form (job_params). Images travel as lossless PNGs (a mask keeps its alpha), and the seed is always written.
#pragma once
#include <nlohmann/json.hpp>

#include "server/request_parse.h"

namespace ernie::server {

// `images` false: an init image and mask are summarized as img2img: {strength, mask} instead (job_params).
nlohmann::json request_to_json(const ParsedRequest& p, bool images = true);
// A job record's `params` (GET /v1/jobs/{id} on both servers) from a request in this form: the same keys, the
// images summarized as img2img: {strength, mask} (they are not repeated in every status).
nlohmann::json job_params(nlohmann::json request);

}  // namespace ernie::server
