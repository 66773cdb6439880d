// Request bodies that carry files: base64 (RFC 4648) both ways (strict: malformed input throws ApiException,
// a 400 naming the field; tests/fuzz/fuzz_form_data.cpp), and the parts of a multipart/form-data body (OpenAI's
// POST /v1/images/edits; RFC 7578), read here from the whole body under a part-count and a part-head limit
// (tests/fuzz/fuzz_multipart.cpp).
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
constexpr size_t kMaxFormParts = 64;              // more is a 400 naming the limit, answered at the 65th part
constexpr size_t kMaxFormPartHeadBytes = 8 << 10;  // a part's header lines, the blank line included; more: 400

// The parts of `body` by the boundary of `content_type` ("multipart/form-data; boundary=..."). Throws
// ApiException (400, code invalid_multipart, too_many_parts or part_head_too_large) naming what is wrong or
// which limit was passed, as soon as it is found: no part past the limit is read.
std::vector<FormPart> parse_multipart(std::string_view content_type, std::string_view body);

}  // namespace ernie::server
