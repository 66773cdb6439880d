// libFuzzer target: the `serve --queue` URL parser (server/redis_url.h) on arbitrary bytes: never crash, an
// accepted URL has a host and its numbers in range, and its canonical text parses back to the same URL.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/redis_url.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ernie::server;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string err;
  const auto u = parse_redis_url(in, &err);
  if (!u) {
    if (err.empty()) __builtin_trap();  // every rejection says why
    return 0;
  }
  if (u->host.empty() || u->port < 1 || u->port > 65535 || u->db < 0 || u->db > 65535) __builtin_trap();
  const auto again = parse_redis_url(format_redis_url(*u));
  if (!again || !(*again == *u)) __builtin_trap();
  return 0;
}
