#include "text/py_str.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace ernie::py {

using ojson = nlohmann::ordered_json;

// ---- UTF-8 -------------------------------------------------------------------------------------------

static bool decode_one(const std::string& s, size_t& i, char32_t& cp) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  int n;
  if (c < 0x80) { cp = c; i += 1; return true; }
  if (c >= 0xC2 && c <= 0xDF) { n = 1; cp = c & 0x1F; }
  else if (c >= 0xE0 && c <= 0xEF) { n = 2; cp = c & 0x0F; }
  else if (c >= 0xF0 && c <= 0xF4) { n = 3; cp = c & 0x07; }
  else return false;
  for (int k = 1; k <= n; ++k) {
    if (i + k >= s.size() || (b(i + k) & 0xC0) != 0x80) return false;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are invalid.
  if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return false;
  i += n + 1;
  return true;
}

bool utf8_valid(const std::string& s, size_t* bad_offset) {
  size_t i = 0;
  char32_t cp;
  while (i < s.size()) {
    if (!decode_one(s, i, cp)) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
  }
  return true;
}

std::vector<char32_t> utf8_decode(const std::string& s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  char32_t cp;
  while (i < s.size()) {
    size_t at = i;
    if (!decode_one(s, i, cp)) fail("invalid UTF-8 at byte ", std::to_string(at));
    out.push_back(cp);
  }
  return out;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

std::string utf8_encode(const std::vector<char32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t c : cps) utf8_append(out, c);
  return out;
}

// ---- whitespace and strip -------------------------------------------------------------------------------

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

template <class Pred>
static std::string strip_if(const std::string& s, Pred drop, bool left, bool right) {
  std::vector<char32_t> cps = utf8_decode(s);
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && drop(cps[b])) ++b;
  if (right)
    while (e > b && drop(cps[e - 1])) --e;
  return utf8_encode(std::vector<char32_t>(cps.begin() + b, cps.begin() + e));
}

std::string strip(const std::string& s, bool left, bool right) { return strip_if(s, is_space, left, right); }

std::string strip_chars(const std::string& s, const std::string& chars, bool left, bool right) {
  std::vector<char32_t> set = utf8_decode(chars);
  auto drop = [&](char32_t c) {
    for (char32_t x : set)
      if (x == c) return true;
    return false;
  };
  return strip_if(s, drop, left, right);
}

// ---- numbers -------------------------------------------------------------------------------------------------

std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // "-1.2345e-05": shortest round-trip digits
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  size_t epos = sci.find('e');
  int exp = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (size_t i = 0; i < epos; ++i)
    if (sci[i] != '.') digits += sci[i];
  if (exp >= -4 && exp < 16) {
    std::string out;
    if (exp < 0) {
      out = "0." + std::string(size_t(-exp - 1), '0') + digits;
    } else {
      size_t int_len = size_t(exp) + 1;
      if (digits.size() <= int_len) out = digits + std::string(int_len - digits.size(), '0') + ".0";
      else out = digits.substr(0, int_len) + "." + digits.substr(int_len);
    }
    return sign + out;
  }
  std::string mant = digits.substr(0, 1);
  if (digits.size() > 1) mant += "." + digits.substr(1);
  char e[16];
  std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return sign + mant + e;
}

static std::string json_float(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  return float_repr(x);
}

// ---- json.dumps -------------------------------------------------------------------------------------------------

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += char(c);
        }
    }
  }
  return out + "\"";
}

static void dumps_into(std::string& out, const ojson& v, int indent, int level) {
  auto newline = [&](int lv) {
    out += '\n';
    out.append(size_t(indent) * size_t(lv), ' ');
  };
  const char* item_sep = indent < 0 ? ", " : ",";
  switch (v.type()) {
    case ojson::value_t::null: out += "null"; break;
    case ojson::value_t::boolean: out += v.get<bool>() ? "true" : "false"; break;
    case ojson::value_t::number_integer: out += std::to_string(v.get<int64_t>()); break;
    case ojson::value_t::number_unsigned: out += std::to_string(v.get<uint64_t>()); break;
    case ojson::value_t::number_float: out += json_float(v.get<double>()); break;
    case ojson::value_t::string: out += json_quote(v.get_ref<const std::string&>()); break;
    case ojson::value_t::array: {
      if (v.empty()) { out += "[]"; break; }
      out += '[';
      bool first = true;
      for (const auto& x : v) {
        if (!first) out += item_sep;
        first = false;
        if (indent >= 0) newline(level + 1);
        dumps_into(out, x, indent, level + 1);
      }
      if (indent >= 0) newline(level);
      out += ']';
      break;
    }
    case ojson::value_t::object: {
      if (v.empty()) { out += "{}"; break; }
      out += '{';
      bool first = true;
      for (const auto& [k, x] : v.items()) {
        if (!first) out += item_sep;
        first = false;
        if (indent >= 0) newline(level + 1);
        out += json_quote(k) + ": ";
        dumps_into(out, x, indent, level + 1);
      }
      if (indent >= 0) newline(level);
      out += '}';
      break;
    }
    default: fail("json.dumps: value of type '", v.type_name(), "' is not serializable");
  }
}

std::string json_dumps(const ojson& v, int indent) {
  std::string out;
  dumps_into(out, v, indent, 0);
  return out;
}

// ---- repr -----------------------------------------------------------------------------------------------------

static bool printable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x206F))
    return false;
  if (c == 0x3000 || c == 0xFEFF || (c >= 0xE000 && c <= 0xF8FF)) return false;
  return true;
}

static std::string repr_str(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  char q = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, q);
  for (char32_t c : utf8_decode(s)) {
    if (c == char32_t(q) || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!printable(c)) {
      char b[16];
      if (c < 0x100) std::snprintf(b, sizeof b, "\\x%02x", unsigned(c));
      else if (c < 0x10000) std::snprintf(b, sizeof b, "\\u%04x", unsigned(c));
      else std::snprintf(b, sizeof b, "\\U%08x", unsigned(c));
      out += b;
    } else {
      utf8_append(out, c);
    }
  }
  return out + q;
}

std::string repr(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null: return "None";
    case ojson::value_t::boolean: return v.get<bool>() ? "True" : "False";
    case ojson::value_t::number_integer: return std::to_string(v.get<int64_t>());
    case ojson::value_t::number_unsigned: return std::to_string(v.get<uint64_t>());
    case ojson::value_t::number_float: return float_repr(v.get<double>());
    case ojson::value_t::string: return repr_str(v.get_ref<const std::string&>());
    case ojson::value_t::array: {
      std::string out = "[";
      for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + repr(v[i]);
      return out + "]";
    }
    case ojson::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : v.items()) {
        out += (first ? "" : ", ") + repr_str(k) + ": " + repr(x);
        first = false;
      }
      return out + "}";
    }
    default: return "<" + std::string(v.type_name()) + ">";
  }
}

std::string str(const ojson& v) { return v.is_string() ? v.get<std::string>() : repr(v); }

}  // namespace ernie::py
