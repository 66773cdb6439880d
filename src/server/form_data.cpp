#include "server/form_data.h"

#include <algorithm>
#include <cstdint>

#include "server/api_error.h"

namespace ernie::server {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int b64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

std::string lower(std::string_view s) {
  std::string o(s);
  for (char& c : o) c = char(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return o;
}
std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

[[noreturn]] void bad_form(const std::string& why, const std::string& code = "invalid_multipart") {
  bad_request("multipart body: " + why, "", code);
}

// The parameters of a field value such as `form-data; name="image"; filename="a.png"` (RFC 9110 §5.6.6:
// token or quoted-string, backslash escapes); names lower-cased. Returns the value before the first ';'.
std::string params(std::string_view v, std::vector<std::pair<std::string, std::string>>& out) {
  size_t pos = v.find(';');
  const std::string first = lower(trim(v.substr(0, pos)));
  while (pos < v.size()) {
    ++pos;  // the ';'
    while (pos < v.size() && (v[pos] == ' ' || v[pos] == '\t')) ++pos;
    const size_t eq = v.find('=', pos);
    if (eq == std::string_view::npos) {
      if (trim(v.substr(pos)).empty()) break;
      bad_form("malformed parameter '" + std::string(trim(v.substr(pos))).substr(0, 64) + "'");
    }
    const std::string name = lower(trim(v.substr(pos, eq - pos)));
    std::string value;
    pos = eq + 1;
    while (pos < v.size() && (v[pos] == ' ' || v[pos] == '\t')) ++pos;
    if (pos < v.size() && v[pos] == '"') {
      for (++pos;; ++pos) {
        if (pos >= v.size()) bad_form("unterminated quoted string in a parameter");
        if (v[pos] == '"') break;
        if (v[pos] == '\\' && pos + 1 < v.size()) ++pos;
        value += v[pos];
      }
      ++pos;
      while (pos < v.size() && (v[pos] == ' ' || v[pos] == '\t')) ++pos;
      if (pos < v.size() && v[pos] != ';') bad_form("text after a quoted parameter");
    } else {
      const size_t end = std::min(v.find(';', pos), v.size());
      value = std::string(trim(v.substr(pos, end - pos)));
      pos = end;
    }
    out.emplace_back(name, value);
  }
  return first;
}

std::string param(const std::vector<std::pair<std::string, std::string>>& ps, const std::string& name) {
  for (auto& [k, v] : ps)
    if (k == name) return v;
  return "";
}

// A part's header lines (up to the blank line) into `p`.
void read_part_head(std::string_view head, FormPart& p) {
  bool disposition = false;
  size_t pos = 0;
  while (pos < head.size()) {
    size_t nl = head.find("\r\n", pos);
    if (nl == std::string_view::npos) nl = head.size();
    const std::string_view line = head.substr(pos, nl - pos);
    pos = nl + 2;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) bad_form("a part's header line has no field name");
    const std::string key = lower(trim(line.substr(0, colon)));
    const std::string_view value = trim(line.substr(colon + 1));
    if (key == "content-disposition") {
      std::vector<std::pair<std::string, std::string>> ps;
      if (params(value, ps) != "form-data") bad_form("a part's Content-Disposition is not form-data");
      p.name = param(ps, "name");
      p.filename = param(ps, "filename");
      disposition = true;
    } else if (key == "content-type") {
      p.content_type = std::string(value);
    }
  }
  if (!disposition) bad_form("a part has no Content-Disposition");
  if (p.name.empty()) bad_form("a part has no name");
}

}  // namespace

std::vector<FormPart> parse_multipart(std::string_view content_type, std::string_view body) {
  std::vector<std::pair<std::string, std::string>> ps;
  if (params(content_type, ps) != "multipart/form-data") bad_form("Content-Type is not multipart/form-data");
  const std::string boundary = param(ps, "boundary");
  if (boundary.empty() || boundary.size() > 70) bad_form("the boundary must have 1 to 70 characters");
  const std::string delim = "\r\n--" + boundary;
  // The first boundary may open the body (no CRLF before it); a preamble before it is skipped.
  size_t pos;
  if (body.substr(0, delim.size() - 2) == std::string_view(delim).substr(2)) pos = delim.size() - 2;
  else if ((pos = body.find(delim)) != std::string_view::npos) pos += delim.size();
  else bad_form("no boundary line");
  std::vector<FormPart> parts;
  while (true) {
    // After a boundary: "--" ends the body, else optional whitespace and CRLF start a part.
    if (body.substr(pos, 2) == "--") break;
    while (pos < body.size() && (body[pos] == ' ' || body[pos] == '\t')) ++pos;
    if (body.substr(pos, 2) != "\r\n") bad_form("a boundary line not followed by CRLF");
    pos += 2;
    if (parts.size() == kMaxFormParts)
      bad_form("more than " + std::to_string(kMaxFormParts) + " parts (the limit)", "too_many_parts");
    if (body.substr(pos, 2) == "\r\n") bad_form("a part has no Content-Disposition");
    const size_t head_end = body.substr(0, std::min(body.size(), pos + kMaxFormPartHeadBytes)).find("\r\n\r\n", pos);
    if (head_end == std::string_view::npos) {
      if (body.size() - pos >= kMaxFormPartHeadBytes)
        bad_form("a part's header is over " + std::to_string(kMaxFormPartHeadBytes) + " bytes (the limit)",
                 "part_head_too_large");
      bad_form("a part's header has no end");
    }
    FormPart p;
    read_part_head(body.substr(pos, head_end - pos), p);
    const size_t data = head_end + 4;
    // The part ends at a boundary line: the delimiter then "--", or blanks and CRLF (RFC 2046), so a part's data
    // may hold the delimiter followed by anything else.
    auto closes = [&](size_t at) {
      size_t q = at + delim.size();
      if (body.substr(q, 2) == "--") return true;
      while (q < body.size() && (body[q] == ' ' || body[q] == '\t')) ++q;
      return body.substr(q, 2) == "\r\n";
    };
    size_t end = body.find(delim, data);
    while (end != std::string_view::npos && !closes(end)) end = body.find(delim, end + 1);
    if (end == std::string_view::npos) bad_form("a part is not closed by a boundary line");
    p.data = std::string(body.substr(data, end - data));
    parts.push_back(std::move(p));
    pos = end + delim.size();
  }
  return parts;
}

std::string base64_encode(const std::string& in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16 | uint32_t(uint8_t(in[i + 1])) << 8 | uint8_t(in[i + 2]);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i < in.size()) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16 | (i + 1 < in.size() ? uint32_t(uint8_t(in[i + 1])) << 8 : 0);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < in.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string base64_decode(std::string_view text, const char* field) {
  const std::string f(field);
  if (text.substr(0, 5) == "data:") {  // data:image/png;base64,....
    const size_t comma = text.find(',');
    if (comma == std::string_view::npos || text.substr(0, comma).find(";base64") == std::string_view::npos)
      bad_request(f + ": a data URL must be base64 (data:image/png;base64,...)", f, "invalid_base64");
    text.remove_prefix(comma + 1);
  }
  size_t n = text.size();
  if (n % 4 == 0 && n >= 1 && text[n - 1] == '=') n -= text[n - 2] == '=' ? 2 : 1;
  if (n % 4 == 1) bad_request(f + " is not valid base64 (its length does not fit)", f, "invalid_base64");
  std::string out;
  out.reserve(n / 4 * 3 + 2);
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; ++i) {
    const int v = b64_value(text[i]);
    if (v < 0)
      bad_request(f + " is not valid base64 (byte " + std::to_string(i) + " is not in its alphabet)", f,
                  "invalid_base64");
    acc = acc << 6 | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += char((acc >> bits) & 0xff);
    }
  }
  if (bits > 0 && (acc & ((1u << bits) - 1)) != 0)
    bad_request(f + " is not valid base64 (stray bits at the end)", f, "invalid_base64");
  return out;
}

}  // namespace ernie::server
