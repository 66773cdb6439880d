#include "server/form_data.h"

#include <cctype>
#include <cstdint>

#include "server/api_error.h"

namespace ernie::server {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr size_t kMaxPartHeader = 8 << 10;

int b64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && (s[a] == ' ' || s[a] == '\t')) ++a;
  while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t')) --b;
  return std::string(s.substr(a, b - a));
}

[[noreturn]] void bad_form(const std::string& why) { bad_request("multipart body: " + why, "", "invalid_multipart"); }

// The value of `key` in a header's ";"-separated parameters (quoted or token), or empty.
std::string header_param(std::string_view value, const std::string& key) {
  size_t i = value.find(';');
  while (i != std::string_view::npos && i < value.size()) {
    ++i;
    while (i < value.size() && (value[i] == ' ' || value[i] == '\t')) ++i;
    const size_t eq = value.find('=', i);
    if (eq == std::string_view::npos) return "";
    const std::string k = lower(trim(value.substr(i, eq - i)));
    size_t j = eq + 1;
    std::string v;
    if (j < value.size() && value[j] == '"') {
      ++j;
      for (; j < value.size() && value[j] != '"'; ++j) {
        if (value[j] == '\\' && j + 1 < value.size()) ++j;
        v += value[j];
      }
      if (j >= value.size()) bad_form("an unterminated quoted parameter");
      ++j;
    } else {
      const size_t end = value.find(';', j);
      v = trim(value.substr(j, end == std::string_view::npos ? std::string_view::npos : end - j));
      j = end == std::string_view::npos ? value.size() : end;
    }
    if (k == key) return v;
    i = value.find(';', j);
  }
  return "";
}

}  // namespace

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

std::string multipart_boundary(const std::string& content_type) {
  const std::string ct = lower(content_type);
  if (ct.rfind("multipart/form-data", 0) != 0)
    bad_request("Content-Type '" + content_type.substr(0, 80) + "' is not multipart/form-data (or application/json)",
                "", "invalid_content_type");
  const std::string b = header_param(content_type, "boundary");
  if (b.empty() || b.size() > 70) bad_form("the Content-Type has no boundary of 1-70 characters");
  return b;
}

std::vector<FormPart> parse_multipart(std::string_view body, const std::string& boundary) {
  const std::string delim = "--" + boundary;
  size_t pos = body.find(delim);
  if (pos == std::string_view::npos) bad_form("no boundary line");
  std::vector<FormPart> parts;
  for (;;) {
    pos += delim.size();
    if (body.substr(pos, 2) == "--") return parts;  // the close delimiter (an epilogue may follow)
    if (body.substr(pos, 2) != "\r\n") bad_form("a boundary line does not end in CRLF");
    pos += 2;
    const size_t head_end = body.find("\r\n\r\n", pos);
    if (head_end == std::string_view::npos || head_end - pos > kMaxPartHeader)
      bad_form("a part's headers do not end (or are over 8 KiB)");
    if (parts.size() == kMaxFormParts) bad_form("more than " + std::to_string(kMaxFormParts) + " parts");
    FormPart p;
    bool disposition = false;
    std::string_view head = body.substr(pos, head_end - pos);
    while (!head.empty()) {
      const size_t eol = head.find("\r\n");
      const std::string_view line = head.substr(0, eol);
      head = eol == std::string_view::npos ? std::string_view() : head.substr(eol + 2);
      const size_t colon = line.find(':');
      if (colon == std::string_view::npos) bad_form("a part header without a colon");
      const std::string key = lower(trim(line.substr(0, colon)));
      const std::string_view value = line.substr(colon + 1);
      if (key == "content-disposition") {
        if (lower(trim(value.substr(0, value.find(';')))) != "form-data") bad_form("a part that is not form-data");
        p.name = header_param(value, "name");
        p.filename = header_param(value, "filename");
        disposition = true;
      } else if (key == "content-type") {
        p.content_type = trim(value);
      }
    }
    if (!disposition || p.name.empty()) bad_form("a part without a Content-Disposition name");
    const size_t data = head_end + 4;
    const size_t next = body.find("\r\n" + delim, data);
    if (next == std::string_view::npos) bad_form("the body ends inside part '" + p.name.substr(0, 64) + "'");
    p.data = std::string(body.substr(data, next - data));
    parts.push_back(std::move(p));
    pos = next + 2;
  }
}

}  // namespace ernie::server
