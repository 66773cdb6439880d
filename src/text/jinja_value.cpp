// Python's semantics for template values: truthiness, equality, ordering, floor division, slices.
#include "text/jinja_value.h"

#include <algorithm>
#include <cctype>
#include <optional>

#include "text/py_str.h"

namespace ernie::jinja {

std::string type_name(const Value& x) {
  if (x.undef()) return "Undefined";
  if (x.k == Value::Namespace) return "Namespace";
  switch (x.v.type()) {
    case ojson::value_t::null: return "NoneType";
    case ojson::value_t::boolean: return "bool";
    case ojson::value_t::number_integer:
    case ojson::value_t::number_unsigned: return "int";
    case ojson::value_t::number_float: return "float";
    case ojson::value_t::string: return "str";
    case ojson::value_t::array: return "list";
    case ojson::value_t::object: return "dict";
    default: return "object";
  }
}

bool is_num(const Value& x) { return !x.undef() && (x.v.is_number() || x.v.is_boolean()); }
bool is_int(const Value& x) { return !x.undef() && (x.v.is_number_integer() || x.v.is_boolean()); }
bool is_str(const Value& x) { return !x.undef() && x.v.is_string(); }
bool is_list(const Value& x) { return !x.undef() && x.v.is_array(); }
bool is_dict(const Value& x) { return !x.undef() && x.v.is_object(); }
int64_t as_int(const ojson& v) { return v.is_boolean() ? int64_t(v.get<bool>()) : v.get<int64_t>(); }
double as_double(const ojson& v) { return v.is_boolean() ? double(v.get<bool>()) : v.get<double>(); }
const std::string& as_str(const Value& x) { return x.v.get_ref<const std::string&>(); }

bool truthy(const Value& x) {
  if (x.undef()) return false;
  const ojson& v = x.v;
  switch (v.type()) {
    case ojson::value_t::null: return false;
    case ojson::value_t::boolean: return v.get<bool>();
    case ojson::value_t::number_integer:
    case ojson::value_t::number_unsigned: return v.get<int64_t>() != 0;
    case ojson::value_t::number_float: return v.get<double>() != 0;
    case ojson::value_t::string: return !v.get_ref<const std::string&>().empty();
    case ojson::value_t::array:
    case ojson::value_t::object: return !v.empty();
    default: return true;
  }
}

std::string to_str(const Value& x) { return x.undef() ? std::string() : py::str(x.v); }

bool py_eq(const ojson& a, const ojson& b) {
  bool an = a.is_number() || a.is_boolean(), bn = b.is_number() || b.is_boolean();
  if (an && bn) {
    if ((a.is_number_integer() || a.is_boolean()) && (b.is_number_integer() || b.is_boolean()))
      return as_int(a) == as_int(b);
    return as_double(a) == as_double(b);
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!py_eq(a[i], b[i])) return false;
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (const auto& [k, v] : a.items()) {
      auto it = b.find(k);
      if (it == b.end() || !py_eq(v, *it)) return false;
    }
    return true;
  }
  return a == b;
}

bool eq(const Value& a, const Value& b) {
  if (a.undef() || b.undef()) return a.undef() && b.undef();
  return py_eq(a.v, b.v);
}

// Python's ordering: numbers with numbers, strings by code point (UTF-8 byte order), lists element-wise.
int py_cmp(const ojson& a, const ojson& b, Pos p, const std::string& op) {
  bool an = a.is_number() || a.is_boolean(), bn = b.is_number() || b.is_boolean();
  if (an && bn) {
    if ((a.is_number_integer() || a.is_boolean()) && (b.is_number_integer() || b.is_boolean())) {
      int64_t x = as_int(a), y = as_int(b);
      return x < y ? -1 : x > y ? 1 : 0;
    }
    double x = as_double(a), y = as_double(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.get_ref<const std::string&>().compare(b.get_ref<const std::string&>());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_array() && b.is_array()) {
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (py_eq(a[i], b[i])) continue;
      return py_cmp(a[i], b[i], p, op);
    }
    return a.size() < b.size() ? -1 : a.size() > b.size() ? 1 : 0;
  }
  error_at(p, "'" + op + "' is not supported between '" + type_name(J(a)) + "' and '" + type_name(J(b)) + "'");
}

int64_t py_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// Python's slice indices for a sequence of length n.
std::vector<int64_t> slice_indices(int64_t n, const Value& start, const Value& stop, const Value& step, Pos p) {
  auto opt = [&](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.undef() || v.v.is_null()) return std::nullopt;
    if (!is_int(v)) error_at(p, std::string("slice ") + what + " must be an integer, not " + type_name(v));
    return as_int(v.v);
  };
  int64_t st = opt(step, "step").value_or(1);
  if (st == 0) error_at(p, "slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) x += n;
    if (st > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  int64_t b = clamp(opt(start, "start"), st > 0 ? 0 : n - 1);
  int64_t e = clamp(opt(stop, "stop"), st > 0 ? n : -1);
  std::vector<int64_t> idx;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) idx.push_back(i);
  return idx;
}

std::string ascii_case(std::string s, bool upper) {
  for (char& c : s)
    c = char(upper ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// About the bytes `v` holds (32 per element, plus its strings' lengths), counted until it passes `limit`.
// Values nesting deeper than `depth` levels are an error: printing, comparing and copying them all recurse.
size_t footprint(const ojson& v, int depth, size_t limit, Pos p) {
  if (v.is_string()) return 32 + v.get_ref<const std::string&>().size();
  if (!v.is_structured()) return 32;
  if (depth <= 0)
    error_at(p, "value nested deeper than " + std::to_string(kMaxValueDepth) + " levels (the depth limit)");
  size_t n = 32;
  for (const auto& [k, x] : v.items()) {
    if (n > limit) break;
    n += (v.is_object() ? k.size() : 0) + footprint(x, depth - 1, limit - std::min(n, limit), p);
  }
  return n;
}

}  // namespace ernie::jinja
