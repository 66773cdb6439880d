// A request as the shared queue carries it (issue 27): the JSON body that parse_generation_request reads back
// to the same ParsedRequest. An api node parses whatever a client sent (JSON, or an edit's multipart form),
// draws the seed, and stores this form; the worker that takes the job parses it again and resolves it on its
// engine. Images travel as lossless PNGs (a mask keeps its alpha), and the seed is always written.
#pragma once
#include <nlohmann/json.hpp>

#include "server/request_parse.h"

namespace ernie::server {

nlohmann::json request_to_json(const ParsedRequest& p);

}  // namespace ernie::server
