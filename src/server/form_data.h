// Request bodies that carry files: base64 (RFC 4648) both ways (strict: malformed input throws ApiException,
// a 400 naming the field; tests/fuzz/fuzz_form_data.cpp), and the parts of a multipart/form-data body (OpenAI's
// POST /v1/images/edits), which httplib's parser reads (server.cpp).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace ernie::server {

std::string base64_encode(const std::string& bytes);
// Standard alphabet with padding, also without padding, and after a data URL's "data:...;base64," prefix;
// whitespace is not allowed. `field` names the request field in errors.
std::string base64_decode(std::string_view text, const char* field);

struct FormPart {
  std::string name;          // Content-Disposition name
  std::string filename;      // empty for a plain field
  std::string content_type;  // the part's Content-Type, or empty
  std::string data;
};
constexpr size_t kMaxFormParts = 64;  // more is a 400

}  // namespace ernie::server
