// The address of the Redis server behind `serve --queue`: redis://HOST[:PORT][/DB]. A pure parser (no
// sockets, no hiredis), so the fuzz target and the option checks can use it alone.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace ernie::server {

struct RedisUrl {
  std::string host;  // a DNS name or IPv4 address, or an IPv6 address without its brackets
  int port = 6379;   // 1..65535
  int db = 0;        // the logical database (SELECT), 0..65535
  bool operator==(const RedisUrl&) const = default;
};

// Parses redis://HOST[:PORT][/DB]. HOST is a name of letters, digits, '-', '_' and '.', or an IPv6 address in
// brackets ([::1]); PORT and DB are plain decimal digits. On a bad URL it returns nothing and sets `error` to
// what is wrong ("redis URL 'x': ..."): another scheme (rediss:// TLS is not supported), a user or
// password (not supported), a query or fragment, an empty host, a port outside 1..65535, a database outside
// 0..65535, or any other character.
std::optional<RedisUrl> parse_redis_url(std::string_view url, std::string* error = nullptr);

// The canonical text of a parsed URL: redis://HOST:PORT/DB (IPv6 in brackets). Parsing it gives `u` back.
std::string format_redis_url(const RedisUrl& u);

}  // namespace ernie::server
