// Errors the HTTP API returns, in the OpenAI error shape:
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "size", "code": "invalid_size"}}
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace ernie::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" -> null
  std::string code;   // "" -> null

  nlohmann::json to_json() const;
};

// Thrown while handling a request; the route turns it into a response.
struct ApiException {
  ApiError error;
};

[[noreturn]] void bad_request(const std::string& message, const std::string& param = "",
                              const std::string& code = "invalid_value");
ApiError unauthorized();
ApiError too_large(size_t limit_bytes);
ApiError queue_full(int max_queue);
ApiError shutting_down();
ApiError not_found(const std::string& what);

}  // namespace ernie::server
