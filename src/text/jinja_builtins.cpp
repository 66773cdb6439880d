// The renderer's built-ins: functions (raise_exception, namespace, range, strftime_now), str and dict
// methods, filters and tests (the lists in chat_template.h).
#include <algorithm>
#include <cmath>
#include <ctime>

#include "text/jinja_render.h"
#include "text/py_str.h"

namespace ernie::jinja {

void Renderer::check_arity(const Args& a, size_t lo, size_t hi, const std::string& what, Pos p,
                           std::initializer_list<const char*> kwnames) {
  if (a.pos.size() < lo && a.kw.empty()) error_at(p, what + " takes at least " + std::to_string(lo) + " argument(s)");
  if (a.pos.size() > hi) error_at(p, what + " takes at most " + std::to_string(hi) + " argument(s)");
  for (const auto& [k, v] : a.kw) {
    bool ok = false;
    for (const char* n : kwnames) ok = ok || k == n;
    if (!ok) error_at(p, what + " got an unexpected keyword argument '" + k + "'");
  }
}

std::string Renderer::str_arg(const Args& a, size_t i, const std::string& name, const std::string& what, Pos p) {
  const Value* v = a.get(i, name);
  if (!v || !is_str(*v)) error_at(p, what + ": argument '" + name + "' must be a string");
  return as_str(*v);
}

Value Renderer::function(const Expr& callee, const Args& a, const Expr& e) {
  {
    const std::string& f = callee.name;
    if (f == "raise_exception") {
      check_arity(a, 1, 1, "raise_exception()", e.pos);
      error_at(e.pos, "raise_exception: " + to_str(a.pos[0]));
    }
    if (f == "namespace") {
      ojson ns = ojson::object();
      if (!a.pos.empty()) {
        if (a.pos.size() > 1 || !is_dict(a.pos[0])) error_at(e.pos, "namespace() takes keyword arguments or one dict");
        ns = a.pos[0].v;
      }
      for (auto& [k, v] : a.kw) ns[k] = adopt(defined(v, e.pos).v, e.pos);
      return {std::move(ns), Value::Namespace};
    }
    if (f == "range") return range(a, e.pos);
    if (f == "strftime_now") {  // transformers' global: datetime.now().strftime(format)
      check_arity(a, 1, 1, "strftime_now()", e.pos);
      if (!is_str(a.pos[0])) error_at(e.pos, "strftime_now(): the format must be a string");
      std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[512];
      size_t n = std::strftime(buf, sizeof buf, as_str(a.pos[0]).c_str(), &tm);
      return J(std::string(buf, n));
    }
    error_at(callee.pos, "unknown function '" + f + "' (supported: raise_exception, namespace, range, strftime_now)");
  }
}

Value Renderer::range(const Args& a, Pos p) {
  check_arity(a, 1, 3, "range()", p);
  for (const Value& v : a.pos)
    if (!is_int(v)) error_at(p, "range() arguments must be integers");
  int64_t start = 0, stop, step = 1;
  if (a.pos.size() == 1) {
    stop = as_int(a.pos[0].v);
  } else {
    start = as_int(a.pos[0].v);
    stop = as_int(a.pos[1].v);
    if (a.pos.size() == 3) step = as_int(a.pos[2].v);
  }
  if (step == 0) error_at(p, "range() step must not be zero");
  double count = std::ceil((double(stop) - double(start)) / double(step));
  if (count > double(kMaxSequence)) error_at(p, "range() is longer than 1,000,000 items");
  ojson out = ojson::array();
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(i);
  return J(std::move(out));
}

Value Renderer::method(const Value& obj, const std::string& m, const Args& a, Pos p) {
  if (obj.undef()) error_at(p, "cannot call method '" + m + "' of an undefined value");
  std::string what = type_name(obj) + "." + m + "()";
  if (is_str(obj)) {
    const std::string& s = as_str(obj);
    if (m == "strip" || m == "lstrip" || m == "rstrip") {
      check_arity(a, 0, 1, what, p);
      bool l = m != "rstrip", r = m != "lstrip";
      if (a.pos.empty() || a.pos[0].v.is_null()) return J(py::strip(s, l, r));
      return J(py::strip_chars(s, str_arg(a, 0, "chars", what, p), l, r));
    }
    if (m == "upper" || m == "lower") {
      check_arity(a, 0, 0, what, p);
      return J(ascii_case(s, m == "upper"));
    }
    if (m == "startswith" || m == "endswith") {
      check_arity(a, 1, 1, what, p);
      std::vector<std::string> cands;
      if (is_list(a.pos[0])) {
        for (const auto& x : a.pos[0].v)
          if (x.is_string()) cands.push_back(x.get<std::string>());
      } else {
        cands.push_back(str_arg(a, 0, "prefix", what, p));
      }
      for (const std::string& c : cands) {
        bool hit = m == "startswith" ? s.compare(0, c.size(), c) == 0
                                     : s.size() >= c.size() && s.compare(s.size() - c.size(), c.size(), c) == 0;
        if (hit) return J(true);
      }
      return J(false);
    }
    if (m == "split") return J(split(s, a, what, p));
    if (m == "replace") {
      check_arity(a, 2, 3, what, p);
      std::string from = str_arg(a, 0, "old", what, p), to = str_arg(a, 1, "new", what, p);
      int64_t count = a.pos.size() == 3 && is_int(a.pos[2]) ? as_int(a.pos[2].v) : -1;
      return J(replace(s, from, to, count, p));
    }
  }
  if (is_dict(obj) || obj.k == Value::Namespace) {
    if (m == "items" || m == "keys" || m == "values") {
      check_arity(a, 0, 0, what, p);
      if (m == "items") adopt(obj.v, p);  // [[k, v], ...] is one level deeper than the dict
      ojson out = ojson::array();
      for (const auto& [k, v] : obj.v.items()) {
        if (m == "items")
          out.push_back(ojson::array({k, v}));
        else if (m == "keys")
          out.push_back(k);
        else
          out.push_back(v);
      }
      return J(std::move(out));
    }
    if (m == "get") {
      check_arity(a, 1, 2, what, p);
      Value v = get_item(obj, a.pos[0], p);
      if (!v.undef()) return v;
      return a.pos.size() == 2 ? a.pos[1] : J(nullptr);
    }
  }
  error_at(p, "unsupported method '" + m + "' on a value of type '" + type_name(obj) + "'");
}

ojson Renderer::split(const std::string& s, const Args& a, const std::string& what, Pos p) {
  check_arity(a, 0, 2, what, p, {"sep", "maxsplit"});
  const Value* sep = a.get(0, "sep");
  const Value* mx = a.get(1, "maxsplit");
  int64_t maxsplit = mx && is_int(*mx) ? as_int(mx->v) : -1;
  ojson out = ojson::array();
  if (!sep || sep->v.is_null()) {  // runs of whitespace, no empty strings
    std::vector<char32_t> cps = py::utf8_decode(s);
    size_t i = 0;
    while (true) {
      while (i < cps.size() && py::is_space(cps[i])) ++i;
      if (i >= cps.size()) break;
      if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
        size_t e = cps.size();
        while (e > i && py::is_space(cps[e - 1])) --e;
        out.push_back(py::utf8_encode({cps.begin() + i, cps.begin() + e}));
        break;
      }
      size_t j = i;
      while (j < cps.size() && !py::is_space(cps[j])) ++j;
      out.push_back(py::utf8_encode({cps.begin() + i, cps.begin() + j}));
      i = j;
    }
    return out;
  }
  if (!is_str(*sep)) error_at(p, what + ": separator must be a string");
  const std::string& d = as_str(*sep);
  if (d.empty()) error_at(p, what + ": empty separator");
  size_t i = 0;
  while (true) {
    size_t j = s.find(d, i);
    if (j == std::string::npos || (maxsplit >= 0 && int64_t(out.size()) == maxsplit)) {
      out.push_back(s.substr(i));
      return out;
    }
    out.push_back(s.substr(i, j - i));
    i = j + d.size();
  }
}

std::string Renderer::replace(const std::string& s, const std::string& from, const std::string& to, int64_t count,
                              Pos p) {
  if (from.empty()) return s;  // Python inserts between characters; not needed by templates
  std::string out;
  size_t i = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t j = s.find(from, i);
    if (j == std::string::npos) break;
    out += s.substr(i, j - i) + to;
    if (out.size() > kMaxOutput) error_at(p, "string is larger than 256 MiB");
    i = j + from.size();
    ++n;
  }
  return out + s.substr(i);
}

Value Renderer::filter(const Expr& e) {
  Value x = eval(*e.args[0]);
  Args a = eval_args(e, 1);
  return apply_filter(e, std::move(x), a);
}

Value Renderer::apply_filter(const Expr& e, Value x, const Args& a) {
  const std::string& f = e.name;
  std::string what = "filter '" + f + "'";
  Pos p = e.pos;
  if (f == "trim") {
    check_arity(a, 0, 1, what, p, {"chars"});
    const Value* c = a.get(0, "chars");
    if (!c || c->v.is_null()) return J(py::strip(to_str(x)));
    return J(py::strip_chars(to_str(x), str_arg(a, 0, "chars", what, p)));
  }
  if (f == "length" || f == "count") {
    check_arity(a, 0, 0, what, p);
    if (x.undef()) return J(0);
    if (is_str(x)) return J(int64_t(py::utf8_decode(as_str(x)).size()));
    if (is_list(x) || is_dict(x)) return J(int64_t(x.v.size()));
    error_at(p, "object of type '" + type_name(x) + "' has no len()");
  }
  if (f == "tojson") {
    check_arity(a, 0, 1, what, p, {"indent"});
    const Value* ind = a.get(0, "indent");
    int indent = -1;
    if (ind && !ind->v.is_null()) {
      if (!is_int(*ind)) error_at(p, "tojson: indent must be an integer");
      indent = int(std::clamp<int64_t>(as_int(ind->v), 0, 64));
    }
    return J(py::json_dumps(defined(x, p).v, indent));
  }
  if (f == "upper" || f == "lower") {
    check_arity(a, 0, 0, what, p);
    return J(ascii_case(to_str(x), f == "upper"));
  }
  if (f == "default" || f == "d") {
    check_arity(a, 0, 2, what, p, {"default_value", "boolean"});
    const Value* dv = a.get(0, "default_value");
    const Value* b = a.get(1, "boolean");
    bool use = x.undef() || (b && truthy(*b) && !truthy(x));
    return use ? (dv ? *dv : J("")) : x;
  }
  if (f == "join") {
    check_arity(a, 0, 1, what, p, {"d"});
    const Value* d = a.get(0, "d");
    std::string sep = d ? to_str(*d) : "", out;
    bool first = true;
    for (const ojson& item : iterate(x, p)) {
      out += (first ? "" : sep) + py::str(item);
      if (out.size() > kMaxOutput) error_at(p, "string is larger than 256 MiB");
      first = false;
    }
    return J(out);
  }
  if (f == "first" || f == "last") {
    check_arity(a, 0, 0, what, p);
    std::vector<ojson> items = iterate(x, p);
    if (items.empty()) return Value::undefined();
    return J(f == "first" ? items.front() : items.back());
  }
  if (f == "string" || f == "safe") {
    check_arity(a, 0, 0, what, p);
    return J(to_str(x));
  }
  if (f == "int") {
    check_arity(a, 0, 1, what, p, {"default"});
    if (is_int(x)) return J(as_int(x.v));
    if (is_num(x)) return J(int64_t(std::trunc(as_double(x.v))));
    if (is_str(x)) {
      try {
        size_t used = 0;
        std::string t = py::strip(as_str(x));
        int64_t v = std::stoll(t, &used);
        if (used == t.size()) return J(v);
      } catch (const std::exception&) {
      }
    }
    const Value* d = a.get(0, "default");
    return d ? *d : J(0);
  }
  if (f == "list") {
    check_arity(a, 0, 0, what, p);
    ojson out = ojson::array();
    for (ojson& item : iterate(x, p)) out.push_back(std::move(item));
    return J(std::move(out));
  }
  if (f == "items") {
    check_arity(a, 0, 0, what, p);
    if (x.undef()) return J(ojson::array());
    if (!is_dict(x)) error_at(p, "filter 'items' needs a dict, not " + type_name(x));
    return method(x, "items", {}, p);
  }
  error_at(p, "unsupported filter '" + f +
                  "' (supported: trim, length, count, tojson, upper, lower, default, d, join, first, last, string, "
                  "int, list, items, safe)");
}

bool Renderer::test(const Expr& e) {
  Value x = eval(*e.args[0]);
  Args a = eval_args(e, 1);
  return apply_test(e, x, a);
}

bool Renderer::apply_test(const Expr& e, const Value& x, const Args& a) {
  const std::string& t = e.name;
  check_arity(a, 0, 0, "test '" + t + "'", e.pos);
  if (t == "defined") return !x.undef();
  if (t == "undefined") return x.undef();
  if (t == "none") return !x.undef() && x.v.is_null();
  if (t == "string") return is_str(x);
  if (t == "number") return !x.undef() && x.v.is_number();
  if (t == "integer") return !x.undef() && x.v.is_number_integer();
  if (t == "float") return !x.undef() && x.v.is_number_float();
  if (t == "boolean") return !x.undef() && x.v.is_boolean();
  if (t == "mapping") return is_dict(x);
  if (t == "sequence") return is_list(x) || is_str(x) || is_dict(x);
  if (t == "iterable") return is_list(x) || is_str(x) || is_dict(x);
  if (t == "true") return !x.undef() && x.v.is_boolean() && x.v.get<bool>();
  if (t == "false") return !x.undef() && x.v.is_boolean() && !x.v.get<bool>();
  if (t == "even" || t == "odd") {
    if (!is_int(x)) error_at(e.pos, "test '" + t + "' needs an integer, not " + type_name(x));
    int64_t v = as_int(x.v);
    return (v % 2 == 0) == (t == "even");
  }
  error_at(e.pos, "unsupported test '" + t +
                      "' (supported: defined, undefined, none, string, number, integer, float, boolean, mapping, "
                      "sequence, iterable, true, false, even, odd)");
}

}  // namespace ernie::jinja
