// The request framing the server accepts, checked on the raw bytes before the HTTP library sees them
// (server/connection_guard.h): RFC 9112's rules on the request line, header fields, Content-Length and
// Transfer-Encoding, with limits on the head's size and field count. Pure functions: no sockets.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ernie::server {

struct HeadLimits {
  size_t max_head_bytes = 16 << 10;  // request line + fields + the blank line
  size_t max_target_bytes = 8192;    // the request target (URI)
  int max_fields = 100;
  size_t max_body_bytes = 1 << 20;
};

struct HeadCheck {
  enum Kind { NeedMore, Ready, Reject };
  Kind kind = NeedMore;
  int status = 0;          // Reject: 400, 413, 414, 431 or 501
  std::string reason;      // Reject: what was wrong, for the response body
  size_t head_bytes = 0;   // Ready: bytes of the head, the blank line included
  bool chunked = false;    // Ready: the body is chunked (Transfer-Encoding: chunked)
  uint64_t content_length = 0;  // Ready, not chunked: the body's bytes
  bool expect_continue = false;  // Ready: "Expect: 100-continue" with a body to come
  std::string target;            // Ready: the request target (path and query)
  int authorization_fields = 0;  // Ready: how many Authorization fields, and the value of the last
  std::string authorization;
};

// Looks at the bytes received so far. NeedMore until the blank line ending the head arrives (a head longer
// than the limit is rejected with 431 before that). Rejects: a malformed request line (400), a target over
// the limit (414), more fields than the limit (431), obsolete line folding, a field name with spaces or
// odd characters, a control character in a value (400), Content-Length values that are not digits or
// disagree (400), Content-Length with Transfer-Encoding (400), a transfer coding other than chunked (501),
// a body over the limit (413), and HTTP/1.1 without exactly one Host (400).
HeadCheck check_request_head(std::string_view received, const HeadLimits& limits);

struct ChunkedCheck {
  enum Kind { NeedMore, Ready, Reject };
  Kind kind = NeedMore;
  int status = 0;       // Reject: 400 (malformed) or 413 (over the body limit)
  std::string reason;
  size_t consumed = 0;  // Ready: bytes of the chunked body, trailer included
};
// Decodes a chunked body from `data` (the bytes after the head) into `body`; NeedMore until the last chunk
// and the trailer's end arrive. Chunk extensions are skipped, trailer fields are checked and dropped.
ChunkedCheck decode_chunked(std::string_view data, size_t max_body_bytes, std::string& body);

// `Authorization: Bearer KEY` given as the only Authorization field (`fields` of them, the last `value`): the
// scheme case-insensitive (RFC 9110 §11.1), the key compared in constant time. True when `key` is empty.
bool bearer_matches(int fields, std::string_view value, std::string_view key);
// `given` equals `key`, compared in constant time for a given length (the API key checks).
bool key_equals(std::string_view given, std::string_view key);

// The request as the HTTP library is given it: the head without Transfer-Encoding and Expect, with
// Content-Length set to the body's size, then the body.
std::string normalized_request(std::string_view head, std::string_view body);

}  // namespace ernie::server
