#include "server/http_head.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <vector>

namespace ernie::server {
namespace {

HeadCheck reject(int status, std::string reason) {
  HeadCheck c;
  c.kind = HeadCheck::Reject;
  c.status = status;
  c.reason = std::move(reason);
  return c;
}

// RFC 9110 tchar: the characters of a token (method, field name, transfer coding).
bool is_tchar(unsigned char c) {
  return std::isalnum(c) || std::string_view("!#$%&'*+-.^_`|~").find(char(c)) != std::string_view::npos;
}
bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return is_tchar(static_cast<unsigned char>(c)); });
}
std::string lower(std::string_view s) {
  std::string o(s);
  for (char& c : o) c = char(std::tolower(static_cast<unsigned char>(c)));
  return o;
}
std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The next line of `s` from `pos` without its "\r\n" or "\n"; nullopt when no line end has arrived yet.
// A CR not followed by LF sets `bad_cr`.
std::optional<std::string_view> next_line(std::string_view s, size_t& pos, bool& bad_cr) {
  const size_t nl = s.find('\n', pos);
  if (nl == std::string_view::npos) return std::nullopt;
  size_t end = nl;
  if (end > pos && s[end - 1] == '\r') --end;
  std::string_view line = s.substr(pos, end - pos);
  bad_cr = bad_cr || line.find('\r') != std::string_view::npos;
  pos = nl + 1;
  return line;
}

// "42" or a list of identical values ("42, 42"), digits only; nullopt when malformed or the values differ.
// Values past 2^63 read as UINT64_MAX (rejected later as too large).
std::optional<uint64_t> parse_content_length(std::string_view v) {
  std::optional<uint64_t> out;
  size_t start = 0;
  while (start <= v.size()) {
    size_t comma = v.find(',', start);
    if (comma == std::string_view::npos) comma = v.size();
    std::string_view part = trim(v.substr(start, comma - start));
    if (part.empty()) return std::nullopt;
    uint64_t n = 0;
    for (char c : part) {
      if (c < '0' || c > '9') return std::nullopt;
      n = n > (UINT64_MAX - 9) / 10 ? UINT64_MAX : n * 10 + uint64_t(c - '0');
    }
    if (out && *out != n) return std::nullopt;
    out = n;
    start = comma + 1;
  }
  return out;
}

}  // namespace

HeadCheck check_request_head(std::string_view in, const HeadLimits& lim) {
  size_t pos = 0;
  bool bad_cr = false;
  // Request line (RFC 9112 §2.2: empty lines before it may be ignored).
  std::optional<std::string_view> line;
  while ((line = next_line(in, pos, bad_cr)) && line->empty() && pos < 8) {
  }
  if (!line) return in.size() > lim.max_head_bytes ? reject(431, "request head too large") : HeadCheck{};
  if (line->empty()) return reject(400, "empty request line");
  const size_t sp1 = line->find(' '), sp2 = sp1 == std::string_view::npos ? sp1 : line->find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line->find(' ', sp2 + 1) != std::string_view::npos)
    return reject(400, "malformed request line");
  const std::string_view method = line->substr(0, sp1), target = line->substr(sp1 + 1, sp2 - sp1 - 1),
                         version = line->substr(sp2 + 1);
  if (!is_token(method)) return reject(400, "malformed method");
  if (target.empty()) return reject(400, "empty request target");
  if (target.size() > lim.max_target_bytes) return reject(414, "request target too long");
  for (char c : target)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return reject(400, "control character in the target");
  if (version != "HTTP/1.1" && version != "HTTP/1.0") return reject(version.rfind("HTTP/", 0) == 0 ? 505 : 400,
                                                                    "unsupported HTTP version");
  const bool http11 = version == "HTTP/1.1";

  int fields = 0, hosts = 0, auth_fields = 0;
  std::string_view authorization;
  std::optional<uint64_t> length;
  bool has_length = false, has_te = false, chunked = false, expect_continue = false;
  while (true) {
    line = next_line(in, pos, bad_cr);
    if (!line) return in.size() > lim.max_head_bytes ? reject(431, "request head too large") : HeadCheck{};
    if (pos > lim.max_head_bytes) return reject(431, "request head too large");
    if (bad_cr) return reject(400, "bare CR in the request head");
    if (line->empty()) break;
    if (++fields > lim.max_fields) return reject(431, "too many header fields");
    if (line->front() == ' ' || line->front() == '\t') return reject(400, "obsolete line folding");
    const size_t colon = line->find(':');
    if (colon == std::string_view::npos) return reject(400, "header field without a colon");
    const std::string_view name = line->substr(0, colon), value = trim(line->substr(colon + 1));
    if (!is_token(name)) return reject(400, "malformed header field name");
    for (char c : value) {
      const auto u = static_cast<unsigned char>(c);
      if ((u < 0x20 && c != '\t') || u == 0x7f) return reject(400, "control character in a header value");
    }
    const std::string key = lower(name);
    if (key == "content-length") {
      const std::optional<uint64_t> n = parse_content_length(value);
      if (!n || (length && *length != *n)) return reject(400, "invalid or conflicting Content-Length");
      length = n;
      has_length = true;
    } else if (key == "transfer-encoding") {
      if (has_te || lower(value) != "chunked") return reject(501, "unsupported transfer coding (only chunked)");
      has_te = chunked = true;
    } else if (key == "host") {
      ++hosts;
    } else if (key == "authorization") {
      ++auth_fields;
      authorization = value;
    } else if (key == "expect") {
      if (lower(value) != "100-continue") return reject(417, "unsupported expectation");
      expect_continue = true;
    }
  }
  if (has_te && has_length) return reject(400, "both Content-Length and Transfer-Encoding");
  if (has_te && !http11) return reject(400, "Transfer-Encoding in an HTTP/1.0 request");
  if (http11 && hosts != 1) return reject(400, hosts ? "more than one Host field" : "no Host field");
  if (has_length && *length > lim.max_body_bytes) return reject(413, "request body too large");
  HeadCheck c;
  c.kind = HeadCheck::Ready;
  c.head_bytes = pos;
  c.chunked = chunked;
  c.content_length = length.value_or(0);
  c.expect_continue = expect_continue && (chunked || c.content_length > 0);
  c.target = target;
  c.authorization_fields = auth_fields;
  c.authorization = authorization;
  return c;
}

bool bearer_matches(int fields, std::string_view h, std::string_view key) {
  if (key.empty()) return true;
  if (fields != 1) return false;
  // "Bearer" 1*SP token (RFC 6750).
  if (h.size() < 7 || lower(h.substr(0, 6)) != "bearer" || h[6] != ' ') return false;
  h.remove_prefix(6);
  while (!h.empty() && h.front() == ' ') h.remove_prefix(1);
  return !h.empty() && key_equals(h, key);
}

bool key_equals(std::string_view given, std::string_view key) {
  if (given.size() != key.size()) return false;
  unsigned char d = 0;
  for (size_t i = 0; i < given.size(); ++i) d |= uint8_t(given[i]) ^ uint8_t(key[i]);
  return d == 0;
}

ChunkedCheck decode_chunked(std::string_view in, size_t max_body, std::string& body) {
  auto bad = [](int status, std::string reason) {
    ChunkedCheck c;
    c.kind = ChunkedCheck::Reject;
    c.status = status;
    c.reason = std::move(reason);
    return c;
  };
  body.clear();
  size_t pos = 0;
  bool bad_cr = false;
  while (true) {
    std::optional<std::string_view> line = next_line(in, pos, bad_cr);
    if (!line) return in.size() - pos > 1024 ? bad(400, "chunk size line too long") : ChunkedCheck{};
    if (bad_cr) return bad(400, "bare CR in a chunk size line");
    const std::string_view size_part = trim(line->substr(0, line->find(';')));  // extensions are skipped
    if (size_part.empty() || size_part.size() > 15) return bad(400, "malformed chunk size");
    uint64_t n = 0;
    for (char c : size_part) {
      const int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
                    : (c >= 'a' && c <= 'f')                     ? c - 'a' + 10
                    : (c >= 'A' && c <= 'F')                     ? c - 'A' + 10
                                                                 : -1;
      if (d < 0) return bad(400, "malformed chunk size");
      n = n * 16 + uint64_t(d);
    }
    if (n == 0) break;
    if (body.size() + n > max_body) return bad(413, "request body too large");
    if (in.size() - pos < n + 1) return ChunkedCheck{};  // the chunk's data and its line end
    body.append(in.substr(pos, n));
    pos += n;
    if (in[pos] == '\r') {
      if (in.size() - pos < 2) return ChunkedCheck{};
      if (in[pos + 1] != '\n') return bad(400, "chunk data not followed by CRLF");
      pos += 2;
    } else if (in[pos] == '\n') {
      pos += 1;
    } else {
      return bad(400, "chunk data longer than its size");
    }
  }
  // The trailer: fields until an empty line, checked and dropped.
  for (int fields = 0;; ++fields) {
    std::optional<std::string_view> line = next_line(in, pos, bad_cr);
    if (!line) return in.size() - pos > 8192 ? bad(400, "chunked trailer too long") : ChunkedCheck{};
    if (bad_cr || fields > 100) return bad(400, "malformed chunked trailer");
    if (line->empty()) break;
    if (line->find(':') == std::string_view::npos) return bad(400, "malformed chunked trailer");
  }
  ChunkedCheck c;
  c.kind = ChunkedCheck::Ready;
  c.consumed = pos;
  return c;
}

std::string normalized_request(std::string_view head, std::string_view body) {
  std::string out;
  out.reserve(head.size() + body.size() + 32);
  size_t pos = 0;
  bool bad_cr = false, first = true;
  while (std::optional<std::string_view> line = next_line(head, pos, bad_cr)) {
    if (line->empty()) {
      if (first) continue;
      break;
    }
    if (!first) {
      const std::string key = lower(trim(line->substr(0, line->find(':'))));
      if (key == "transfer-encoding" || key == "content-length" || key == "expect") continue;
    }
    out.append(*line).append("\r\n");
    first = false;
  }
  out += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  out.append(body);
  return out;
}

}  // namespace ernie::server
