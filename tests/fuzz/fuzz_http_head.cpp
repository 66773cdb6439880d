// libFuzzer target: the server's request framing (server/http_head.h) on arbitrary bytes: never crash, and
// what it accepts lies inside the input and within the limits.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/http_head.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ernie::server;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  HeadLimits lim;
  lim.max_body_bytes = 4096;
  const HeadCheck h = check_request_head(in, lim);
  if (h.kind == HeadCheck::Ready) {
    if (h.head_bytes > size || h.content_length > lim.max_body_bytes) __builtin_trap();
    std::string body;
    const std::string_view rest = in.substr(h.head_bytes);
    const ChunkedCheck c = decode_chunked(rest, lim.max_body_bytes, body);
    if (c.kind == ChunkedCheck::Ready && (c.consumed > rest.size() || body.size() > lim.max_body_bytes))
      __builtin_trap();
    const std::string n = normalized_request(in.substr(0, h.head_bytes), body);
    if (check_request_head(n, lim).kind == HeadCheck::Reject && check_request_head(n, lim).status != 431)
      __builtin_trap();  // a normalized request must pass the rules it was checked by
  }
  return 0;
}
