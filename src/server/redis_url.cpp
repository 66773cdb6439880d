#include "server/redis_url.h"

#include <cctype>

namespace ernie::server {

namespace {

bool fail(std::string* error, std::string_view url, const std::string& why) {
  if (error) {
    std::string shown(url.substr(0, 200));
    for (char& c : shown)
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) == 0x7f) c = '?';
    *error = "redis URL '" + shown + "': " + why;
  }
  return false;
}

// Decimal digits only, no sign, value within [lo, hi].
bool parse_number(std::string_view s, long lo, long hi, int& out) {
  if (s.empty() || s.size() > 6) return false;
  long v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v < lo || v > hi) return false;
  out = static_cast<int>(v);
  return true;
}

bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
}

bool ipv6_char(char c) { return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.'; }

}  // namespace

std::optional<RedisUrl> parse_redis_url(std::string_view url, std::string* error) {
  constexpr std::string_view scheme = "redis://";
  if (url.substr(0, 9) == "rediss://") {
    fail(error, url, "TLS (rediss://) is not supported; use redis:// on a private network");
    return std::nullopt;
  }
  if (url.substr(0, scheme.size()) != scheme) {
    fail(error, url, "expected redis://HOST[:PORT][/DB]");
    return std::nullopt;
  }
  std::string_view rest = url.substr(scheme.size());
  if (rest.find_first_of("?#") != std::string_view::npos) {
    fail(error, url, "query strings and fragments are not supported");
    return std::nullopt;
  }
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (authority.find('@') != std::string_view::npos) {
    fail(error, url, "a user or password in the URL is not supported");
    return std::nullopt;
  }
  RedisUrl u;
  std::string_view port;
  bool has_port = false;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      fail(error, url, "an IPv6 address needs its closing ']'");
      return std::nullopt;
    }
    std::string_view h = authority.substr(1, close - 1);
    if (h.empty() || h.size() > 45 || h.find(':') == std::string_view::npos) {
      fail(error, url, "bad IPv6 address");
      return std::nullopt;
    }
    for (char c : h)
      if (!ipv6_char(c)) {
        fail(error, url, "bad IPv6 address");
        return std::nullopt;
      }
    u.host = std::string(h);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') {
        fail(error, url, "expected ':PORT' after the IPv6 address");
        return std::nullopt;
      }
      has_port = true;
      port = after.substr(1);
    }
  } else {
    const size_t colon = authority.find(':');
    std::string_view h = authority.substr(0, colon);
    if (h.empty()) {
      fail(error, url, "the host is empty");
      return std::nullopt;
    }
    if (h.size() > 253) {
      fail(error, url, "the host name is longer than 253 characters");
      return std::nullopt;
    }
    for (char c : h)
      if (!name_char(c)) {
        fail(error, url, "the host may hold only letters, digits, '-', '_' and '.' (IPv6 in brackets)");
        return std::nullopt;
      }
    u.host = std::string(h);
    if (colon != std::string_view::npos) {
      has_port = true;
      port = authority.substr(colon + 1);
    }
  }
  if (has_port && !parse_number(port, 1, 65535, u.port)) {
    fail(error, url, "the port must be a number in 1..65535");
    return std::nullopt;
  }
  if (slash != std::string_view::npos) {
    if (!parse_number(rest.substr(slash + 1), 0, 65535, u.db)) {
      fail(error, url, "the database after '/' must be a number in 0..65535");
      return std::nullopt;
    }
  }
  return u;
}

std::string format_redis_url(const RedisUrl& u) {
  const bool v6 = u.host.find(':') != std::string::npos;
  return "redis://" + (v6 ? "[" + u.host + "]" : u.host) + ":" + std::to_string(u.port) + "/" +
         std::to_string(u.db);
}

}  // namespace ernie::server
