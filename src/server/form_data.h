// Request bodies that carry files: base64 (RFC 4648) both ways, and multipart/form-data (RFC 7578), the body
// of OpenAI's POST /v1/images/edits. Both parsers are strict and bounded (tests/fuzz/fuzz_form_data.cpp):
// malformed input throws ApiException (400) naming the field.
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
constexpr size_t kMaxFormParts = 64;

// The boundary of a "multipart/form-data; boundary=..." Content-Type; throws unless it is one.
std::string multipart_boundary(const std::string& content_type);
// The parts of a multipart body, in order (at most kMaxFormParts; part headers at most 8 KiB each).
std::vector<FormPart> parse_multipart(std::string_view body, const std::string& boundary);

}  // namespace ernie::server
