// Python's string and JSON semantics, byte for byte, for the places where the reference's output is a
// Python string: json.dumps (the prompt enhancer's user content, Jinja's tojson as transformers defines
// it), repr/str of values (what Jinja prints for a list or a float), str.strip() and len() on UTF-8.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ernie::py {

// json.dumps(v, ensure_ascii=False): separators ", " and ": " (indent < 0), or "," and ": " with
// newlines and `indent` spaces per level (indent >= 0, as Python). Strings escape \" \\ \n \r \t \b \f
// and other C0 controls as \u00xx; everything else (DEL, non-ASCII) stays raw. Floats as repr().
std::string json_dumps(const nlohmann::ordered_json& v, int indent = -1);
// json.dumps of one string (with the quotes).
std::string json_quote(const std::string& s);

// repr(float): the shortest round-trip digits, fixed for 1e-4 <= |x| < 1e16 (always with a '.'),
// scientific otherwise ("1e+16", "1.5e-07"); "nan", "inf", "-inf".
std::string float_repr(double x);
// repr(v) as Python would print the equivalent object: 'str', 1, 1.0, True, None, [..], {'k': v}.
std::string repr(const nlohmann::ordered_json& v);
// str(v): strings raw, everything else as repr().
std::string str(const nlohmann::ordered_json& v);

// UTF-8 <-> code points. decode() throws Error naming the byte offset on invalid UTF-8.
std::vector<char32_t> utf8_decode(const std::string& s);
std::string utf8_encode(const std::vector<char32_t>& cps);
void utf8_append(std::string& out, char32_t cp);
bool utf8_valid(const std::string& s, size_t* bad_offset = nullptr);

// str.isspace() for one code point (Unicode White_Space as CPython defines it).
bool is_space(char32_t c);
// str.strip() / lstrip() / rstrip() with no argument (Unicode whitespace), or with `chars`.
std::string strip(const std::string& s, bool left = true, bool right = true);
std::string strip_chars(const std::string& s, const std::string& chars, bool left = true, bool right = true);

}  // namespace ernie::py
