#include "server/api_error.h"

namespace ernie::server {

nlohmann::json ApiError::to_json() const {
  using nlohmann::json;
  return json{{"error",
               {{"message", message},
                {"type", type},
                {"param", param.empty() ? json(nullptr) : json(param)},
                {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

void bad_request(const std::string& message, const std::string& param, const std::string& code) {
  throw ApiException{ApiError{400, message, "invalid_request_error", param, code}};
}

ApiError unauthorized() {
  return {401, "missing or wrong API key: send the header 'Authorization: Bearer <key>' with the key the server was started with (--api-key)",
          "invalid_request_error", "", "invalid_api_key"};
}

ApiError too_large(size_t limit_bytes) {
  return {413, "request body is larger than this server's limit of " + std::to_string(limit_bytes) + " bytes",
          "invalid_request_error", "", "request_too_large"};
}

ApiError queue_full(int max_queue) {
  return {429, "the queue is full (" + std::to_string(max_queue) + " requests waiting); retry later",
          "rate_limit_error", "", "queue_full"};
}

ApiError shutting_down() {
  return {503, "the server is shutting down and accepts no new work", "server_error", "", "shutting_down"};
}

ApiError not_found(const std::string& what) { return {404, what, "invalid_request_error", "", "not_found"}; }

}  // namespace ernie::server
