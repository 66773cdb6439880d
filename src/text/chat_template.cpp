// Evaluator of the parsed template (jinja_ast.h) with Python's value semantics, plus the helpers that
// build apply_chat_template's variables and find a tokenizer folder's template.
#include "text/chat_template.h"

#include <algorithm>
#include <climits>
#include <ctime>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>

#include "core/error.h"
#include "core/file.h"
#include "core/json.h"
#include "text/jinja_ast.h"
#include "text/py_str.h"

namespace ernie {
namespace jinja {
namespace {

using ojson = nlohmann::ordered_json;

// A template value: a JSON value, Jinja's Undefined, or a namespace() object (a mutable dict).
struct Value {
  enum Kind : uint8_t { Json, Undefined, Namespace };
  ojson v;
  Kind k = Json;
  static Value undefined() { return {ojson(), Undefined}; }
  bool undef() const { return k == Undefined; }
};
Value J(ojson v) { return {std::move(v), Value::Json}; }

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
  for (char& c : s) c = char(upper ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
  return s;
}

constexpr int64_t kMaxIterations = 100'000;
constexpr size_t kMaxOutput = size_t(256) << 20;
constexpr size_t kMaxSequence = 1'000'000;

// Bytes (as footprint() counts them) that one render may copy into new lists, dicts and namespaces. Real
// templates copy a few messages; 32 MiB is thousands of times that.
constexpr size_t kMaxBuilt = size_t(32) << 20;

// About the bytes `v` holds (32 per element, plus its strings' lengths), counted until it passes `limit`.
// Values nesting deeper than `depth` levels are an error: printing, comparing and copying them all recurse.
size_t footprint(const ojson& v, int depth, size_t limit, Pos p) {
  if (v.is_string()) return 32 + v.get_ref<const std::string&>().size();
  if (!v.is_structured()) return 32;
  if (depth <= 0) error_at(p, "value nested deeper than " + std::to_string(kMaxValueDepth) + " levels (the depth limit)");
  size_t n = 32;
  for (const auto& [k, x] : v.items()) {
    if (n > limit) break;
    n += (v.is_object() ? k.size() : 0) + footprint(x, depth - 1, limit - std::min(n, limit), p);
  }
  return n;
}

enum class Flow { Normal, Break, Continue };

class Renderer {
 public:
  Renderer(const ojson& globals) : globals_(globals) { frames_.emplace_back(); }

  std::string run(const Body& body) {
    exec(body);
    return std::move(out_);
  }

 private:
  const ojson& globals_;
  std::vector<std::map<std::string, Value>> frames_;
  std::string out_;
  int64_t iterations_ = 0;
  int loop_depth_ = 0;
  size_t built_ = 0;  // bytes adopt() let into new values so far

  // `v` copied `times` times into a new list, dict or namespace. Such values stay within kMaxValueDepth, and
  // all of them together, over the whole render, within kMaxBuilt: `{% set ns.x = [ns.x] %}` in a loop would
  // nest deeper every turn, `{% set ns.x = [ns.x, ns.x] %}` would double its size.
  const ojson& adopt(const ojson& v, Pos p, size_t times = 1, int depth = kMaxValueDepth - 1) {
    const size_t left = times > 0 ? (kMaxBuilt - built_) / times : kMaxBuilt;
    const size_t n = footprint(v, depth, left, p);
    if (times > 0 && n > left)
      error_at(p, "the template built values of more than " + std::to_string(kMaxBuilt >> 20) + " MiB (the size limit)");
    built_ += n * times;
    return v;
  }

  // ---- statements ----

  Flow exec(const Body& body) {
    for (const Node& n : body) {
      Flow f = exec(n);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  void emit(const std::string& s, Pos p) {
    out_ += s;
    if (out_.size() > kMaxOutput) error_at(p, "output is larger than 256 MiB");
  }

  Flow exec(const Node& n) {
    switch (n.kind) {
      case Node::Text: emit(n.text, n.pos); return Flow::Normal;
      case Node::Output: emit(to_str(eval(*n.expr)), n.pos); return Flow::Normal;
      case Node::Set: exec_set(n); return Flow::Normal;
      case Node::If:
        for (const auto& [cond, body] : n.branches)
          if (!cond || truthy(eval(*cond))) return exec(body);
        return Flow::Normal;
      case Node::For: return exec_for(n);
      case Node::Break:
      case Node::Continue:
        if (loop_depth_ == 0) error_at(n.pos, "'break' or 'continue' outside a for loop");
        return n.kind == Node::Break ? Flow::Break : Flow::Continue;
    }
    return Flow::Normal;
  }

  std::vector<ojson> iterate(const Value& it, Pos p) {
    std::vector<ojson> items;
    if (it.undef()) return items;
    const ojson& v = it.v;
    if (v.is_array()) {
      items.assign(v.begin(), v.end());
    } else if (v.is_object()) {
      for (const auto& [k, x] : v.items()) items.emplace_back(k);
    } else if (v.is_string()) {
      for (char32_t c : py::utf8_decode(v.get_ref<const std::string&>())) {
        std::string s;
        py::utf8_append(s, c);
        items.emplace_back(s);
      }
    } else {
      error_at(p, "'" + type_name(it) + "' object is not iterable");
    }
    return items;
  }

  // The renderer recurses exec(Body) -> exec(Node) -> exec(Body) once per nested block, and eval() -> filter,
  // binary, call ... -> eval() once per level of an expression: those frames stay small (sanitizer builds
  // give every local its own slot), the work that does not recurse is in out-of-line functions.
  [[gnu::noinline]] void exec_set(const Node& n) {
    Value v = eval(*n.expr);
    if (!n.set_attr) {
      frames_.back()[n.targets[0]] = std::move(v);
      return;
    }
    Value* ns = lookup_ref(n.targets[0]);
    if (!ns || ns->k != Value::Namespace)
      error_at(n.pos, "'set " + n.targets[0] + "." + n.targets[1] + "' needs '" + n.targets[0] +
                          "' to be a namespace() object");
    adopt(v.v, n.pos);
    ns->v[n.targets[1]] = std::move(v.v);
  }

  [[gnu::noinline]] Flow exec_for(const Node& n) {
    std::vector<ojson> all = iterate(eval(*n.expr), n.expr->pos);
    frames_.emplace_back();
    auto bind = [&](const ojson& item) {
      auto& f = frames_.back();
      if (n.targets.size() == 1) {
        f[n.targets[0]] = J(item);
        return;
      }
      if (!item.is_array() || item.size() != n.targets.size())
        error_at(n.pos, "cannot unpack a " + type_name(J(item)) + " into " + std::to_string(n.targets.size()) +
                            " loop variables");
      for (size_t i = 0; i < n.targets.size(); ++i) f[n.targets[i]] = J(item[i]);
    };
    std::vector<ojson> items;
    if (n.loop_filter) {
      for (const ojson& x : all) {
        bind(x);
        if (truthy(eval(*n.loop_filter))) items.push_back(x);
      }
    } else {
      items = std::move(all);
    }
    ++loop_depth_;
    const int64_t len = int64_t(items.size());
    for (int64_t i = 0; i < len; ++i) {
      if (++iterations_ > kMaxIterations) error_at(n.pos, "more than 100,000 loop iterations");
      bind(items[size_t(i)]);
      ojson loop = ojson::object();
      loop["index"] = i + 1;
      loop["index0"] = i;
      loop["revindex"] = len - i;
      loop["revindex0"] = len - i - 1;
      loop["first"] = i == 0;
      loop["last"] = i == len - 1;
      loop["length"] = len;
      if (i > 0) loop["previtem"] = items[size_t(i - 1)];
      if (i + 1 < len) loop["nextitem"] = items[size_t(i + 1)];
      frames_.back()["loop"] = J(std::move(loop));
      if (exec(n.body) == Flow::Break) break;
    }
    --loop_depth_;
    if (len == 0) exec(n.else_body);
    frames_.pop_back();
    return Flow::Normal;
  }

  // ---- names ----

  Value* lookup_ref(const std::string& name) {
    for (auto f = frames_.rbegin(); f != frames_.rend(); ++f) {
      auto it = f->find(name);
      if (it != f->end()) return &it->second;
    }
    return nullptr;
  }

  Value lookup(const std::string& name) {
    if (Value* v = lookup_ref(name)) return *v;
    if (globals_.is_object()) {
      auto it = globals_.find(name);
      if (it != globals_.end()) return J(*it);
    }
    return Value::undefined();
  }

  // ---- expressions ----

  Value eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Literal: return J(e.value);
      case Expr::Name: return lookup(e.name);
      case Expr::List: return list(e);
      case Expr::Dict: return dict(e);
      case Expr::GetAttr: return get_attr(e);
      case Expr::GetItem: return get_item(e);
      case Expr::Slice: return slice(e);
      case Expr::Call: return call(e);
      case Expr::Filter: return filter(e);
      case Expr::Test: return J(test(e) != e.negated);
      case Expr::Unary: return unary(e);
      case Expr::Binary: return binary(e);
      case Expr::Cond:
        if (truthy(eval(*e.args[1]))) return eval(*e.args[0]);
        return e.args[2] ? eval(*e.args[2]) : Value::undefined();
    }
    return Value::undefined();
  }

  static const Value& defined(const Value& v, Pos p) {
    if (v.undef()) error_at(p, "value is undefined");
    return v;
  }

  [[gnu::noinline]] Value list(const Expr& e) {
    ojson l = ojson::array();
    for (const auto& a : e.args) {
      Value v = eval(*a);
      l.push_back(adopt(defined(v, a->pos).v, a->pos));
    }
    return J(std::move(l));
  }
  [[gnu::noinline]] Value dict(const Expr& e) {
    ojson d = ojson::object();
    for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
      Value k = eval(*e.args[i]);
      if (!is_str(k)) error_at(e.args[i]->pos, "dict keys must be strings here, not " + type_name(k));
      Value v = eval(*e.args[i + 1]);
      d[as_str(k)] = adopt(defined(v, e.args[i + 1]->pos).v, e.args[i + 1]->pos);
    }
    return J(std::move(d));
  }
  [[gnu::noinline]] Value get_attr(const Expr& e) {
    Value obj = eval(*e.args[0]);
    return get_attr(obj, e.name, e.pos);
  }
  [[gnu::noinline]] Value get_item(const Expr& e) {
    Value obj = eval(*e.args[0]);
    Value key = eval(*e.args[1]);
    return get_item(obj, key, e.pos);
  }

  [[gnu::noinline]] Value get_attr(const Value& obj, const std::string& name, Pos p) {
    if (obj.undef()) error_at(p, "cannot read attribute '" + name + "' of an undefined value");
    if (obj.v.is_object()) {
      auto it = obj.v.find(name);
      return it == obj.v.end() ? Value::undefined() : J(*it);
    }
    return Value::undefined();
  }

  [[gnu::noinline]] Value get_item(const Value& obj, const Value& key, Pos p) {
    if (obj.undef()) error_at(p, "cannot index an undefined value");
    const ojson& v = obj.v;
    if (v.is_object()) {
      if (!is_str(key)) return Value::undefined();
      auto it = v.find(as_str(key));
      return it == v.end() ? Value::undefined() : J(*it);
    }
    if (v.is_array() || v.is_string()) {
      if (!is_int(key)) error_at(p, type_name(obj) + " indices must be integers, not " + type_name(key));
      int64_t i = as_int(key.v);
      if (v.is_array()) {
        int64_t n = int64_t(v.size());
        if (i < 0) i += n;
        return (i < 0 || i >= n) ? Value::undefined() : J(v[size_t(i)]);
      }
      std::vector<char32_t> cps = py::utf8_decode(v.get_ref<const std::string&>());
      int64_t n = int64_t(cps.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined();
      std::string s;
      py::utf8_append(s, cps[size_t(i)]);
      return J(s);
    }
    return Value::undefined();
  }

  [[gnu::noinline]] Value slice(const Expr& e) {
    Value obj = eval(*e.args[0]);
    auto part = [&](int k) { return e.args[size_t(k)] ? eval(*e.args[size_t(k)]) : J(nullptr); };
    Value a = part(1), b = part(2), c = part(3);
    if (is_list(obj)) {
      ojson out = ojson::array();
      for (int64_t i : slice_indices(int64_t(obj.v.size()), a, b, c, e.pos)) out.push_back(obj.v[size_t(i)]);
      return J(std::move(out));
    }
    if (is_str(obj)) {
      std::vector<char32_t> cps = py::utf8_decode(as_str(obj)), out;
      for (int64_t i : slice_indices(int64_t(cps.size()), a, b, c, e.pos)) out.push_back(cps[size_t(i)]);
      return J(py::utf8_encode(out));
    }
    error_at(e.pos, "cannot slice a value of type '" + type_name(obj) + "'");
  }

  // ---- calls ----

  struct Args {
    std::vector<Value> pos;
    std::vector<std::pair<std::string, Value>> kw;
    const Value* get(size_t i, const std::string& name) const {
      if (i < pos.size()) return &pos[i];
      for (const auto& [k, v] : kw)
        if (k == name) return &v;
      return nullptr;
    }
  };

  Args eval_args(const Expr& e, size_t first) {
    Args a;
    for (size_t i = first; i < e.args.size(); ++i) a.pos.push_back(eval(*e.args[i]));
    for (const auto& [k, x] : e.kwargs) a.kw.emplace_back(k, eval(*x));
    return a;
  }

  static void check_arity(const Args& a, size_t lo, size_t hi, const std::string& what, Pos p,
                          std::initializer_list<const char*> kwnames = {}) {
    if (a.pos.size() < lo && a.kw.empty())
      error_at(p, what + " takes at least " + std::to_string(lo) + " argument(s)");
    if (a.pos.size() > hi) error_at(p, what + " takes at most " + std::to_string(hi) + " argument(s)");
    for (const auto& [k, v] : a.kw) {
      bool ok = false;
      for (const char* n : kwnames) ok = ok || k == n;
      if (!ok) error_at(p, what + " got an unexpected keyword argument '" + k + "'");
    }
  }

  std::string str_arg(const Args& a, size_t i, const std::string& name, const std::string& what, Pos p) {
    const Value* v = a.get(i, name);
    if (!v || !is_str(*v)) error_at(p, what + ": argument '" + name + "' must be a string");
    return as_str(*v);
  }

  [[gnu::noinline]] Value call(const Expr& e) {
    const Expr& callee = *e.args[0];
    Args a = eval_args(e, 1);
    if (callee.kind == Expr::Name && !lookup_ref(callee.name)) return function(callee, a, e);
    if (callee.kind == Expr::GetAttr) {
      Value obj = eval(*callee.args[0]);
      return method(obj, callee.name, a, e.pos);
    }
    error_at(e.pos, "this expression cannot be called");
  }

  [[gnu::noinline]] Value function(const Expr& callee, const Args& a, const Expr& e) {
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

  Value range(const Args& a, Pos p) {
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

  [[gnu::noinline]] Value method(const Value& obj, const std::string& m, const Args& a, Pos p) {
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
          if (m == "items") out.push_back(ojson::array({k, v}));
          else if (m == "keys") out.push_back(k);
          else out.push_back(v);
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

  static ojson split(const std::string& s, const Args& a, const std::string& what, Pos p) {
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

  static std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count,
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

  // ---- filters ----

  [[gnu::noinline]] Value filter(const Expr& e) {
    Value x = eval(*e.args[0]);
    Args a = eval_args(e, 1);
    return apply_filter(e, std::move(x), a);
  }

  [[gnu::noinline]] Value apply_filter(const Expr& e, Value x, const Args& a) {
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

  // ---- tests ----

  [[gnu::noinline]] bool test(const Expr& e) {
    Value x = eval(*e.args[0]);
    Args a = eval_args(e, 1);
    return apply_test(e, x, a);
  }

  [[gnu::noinline]] bool apply_test(const Expr& e, const Value& x, const Args& a) {
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

  // ---- operators ----

  [[gnu::noinline]] Value unary(const Expr& e) {
    Value x = eval(*e.args[0]);
    if (e.name == "not") return J(!truthy(x));
    if (!is_num(x)) error_at(e.pos, "bad operand type for unary " + e.name + ": '" + type_name(x) + "'");
    if (e.name == "+") return is_int(x) ? J(as_int(x.v)) : x;
    if (is_int(x)) {
      int64_t v = as_int(x.v);
      if (v == INT64_MIN) error_at(e.pos, "integer overflow");
      return J(-v);
    }
    return J(-as_double(x.v));
  }

  [[noreturn]] static void bad_operands(const std::string& op, const Value& a, const Value& b, Pos p) {
    error_at(p, "unsupported operand types for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
  }

  [[gnu::noinline]] Value binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value a = eval(*e.args[0]);
      return truthy(a) ? eval(*e.args[1]) : a;
    }
    if (op == "or") {
      Value a = eval(*e.args[0]);
      return truthy(a) ? a : eval(*e.args[1]);
    }
    Value a = eval(*e.args[0]), b = eval(*e.args[1]);
    return binary_op(op, a, b, e.pos);
  }

  [[gnu::noinline]] Value binary_op(const std::string& op, const Value& a, const Value& b, Pos p) {
    if (op == "~") {
      std::string s = to_str(a) + to_str(b);
      if (s.size() > kMaxOutput) error_at(p, "string is larger than 256 MiB");
      return J(std::move(s));
    }
    if (op == "==") return J(eq(a, b));
    if (op == "!=") return J(!eq(a, b));
    if (op == "in" || op == "not in") return J(contains(b, a, p) == (op == "in"));
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      if (a.undef() || b.undef()) error_at(p, "cannot compare an undefined value");
      int c = py_cmp(a.v, b.v, p, op);
      bool r = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
      return J(r);
    }
    return arith(op, a, b, p);
  }

  bool contains(const Value& hay, const Value& needle, Pos p) {
    if (hay.undef()) return false;
    if (is_str(hay)) {
      if (!is_str(needle)) error_at(p, "'in <string>' requires a string as left operand, not " + type_name(needle));
      return as_str(hay).find(as_str(needle)) != std::string::npos;
    }
    if (is_list(hay)) {
      for (const ojson& x : hay.v)
        if (!needle.undef() && py_eq(x, needle.v)) return true;
      return false;
    }
    if (is_dict(hay) || hay.k == Value::Namespace) return is_str(needle) && hay.v.contains(as_str(needle));
    error_at(p, "argument of type '" + type_name(hay) + "' is not iterable");
  }

  Value arith(const std::string& op, const Value& a, const Value& b, Pos p) {
    if (is_num(a) && is_num(b)) {
      bool ints = is_int(a) && is_int(b);
      if (ints && op != "/") {
        int64_t x = as_int(a.v), y = as_int(b.v), r = 0;
        bool ovf = false;
        if (op == "+") ovf = __builtin_add_overflow(x, y, &r);
        else if (op == "-") ovf = __builtin_sub_overflow(x, y, &r);
        else if (op == "*") ovf = __builtin_mul_overflow(x, y, &r);
        else if (op == "//" || op == "%") {
          if (y == 0) error_at(p, "integer division or modulo by zero");
          if (x == INT64_MIN && y == -1) error_at(p, "integer overflow");
          int64_t q = py_floordiv(x, y);
          r = op == "//" ? q : x - q * y;
        } else if (op == "**") {
          if (y < 0) return J(std::pow(double(x), double(y)));
          r = 1;
          for (int64_t i = 0; i < y && !ovf; ++i) ovf = __builtin_mul_overflow(r, x, &r);
        }
        if (ovf) error_at(p, "integer overflow in '" + op + "'");
        return J(r);
      }
      double x = as_double(a.v), y = as_double(b.v);
      if (op == "+") return J(x + y);
      if (op == "-") return J(x - y);
      if (op == "*") return J(x * y);
      if (op == "**") return J(std::pow(x, y));
      if (y == 0) error_at(p, "float division by zero");
      if (op == "/") return J(x / y);
      double q = std::floor(x / y);
      return J(op == "//" ? q : x - q * y);
    }
    if (op == "+") {
      if (is_str(a) && is_str(b)) {
        if (as_str(a).size() + as_str(b).size() > kMaxOutput) error_at(p, "string is larger than 256 MiB");
        return J(as_str(a) + as_str(b));
      }
      if (is_list(a) && is_list(b)) {
        adopt(a.v, p, 1, kMaxValueDepth);
        adopt(b.v, p, 1, kMaxValueDepth);
        ojson l = a.v;
        for (const auto& x : b.v) l.push_back(x);
        return J(std::move(l));
      }
    }
    if (op == "*" && ((is_str(a) || is_list(a)) && is_int(b))) return repeat(a, as_int(b.v), p);
    if (op == "*" && ((is_str(b) || is_list(b)) && is_int(a))) return repeat(b, as_int(a.v), p);
    if (op == "%" && is_str(a)) error_at(p, "string formatting with '%' is not supported");
    if (a.undef() || b.undef()) error_at(p, "undefined value used with '" + op + "'");
    bad_operands(op, a, b, p);
  }

  Value repeat(const Value& s, int64_t n, Pos p) {
    if (n <= 0) return J(is_str(s) ? ojson("") : ojson::array());
    size_t unit = is_str(s) ? as_str(s).size() : s.v.size();
    if (unit * size_t(n) > kMaxSequence * 16 || n > int64_t(kMaxSequence)) error_at(p, "repetition is too large");
    if (is_str(s)) {
      std::string out;
      for (int64_t i = 0; i < n; ++i) out += as_str(s);
      return J(out);
    }
    adopt(s.v, p, size_t(n), kMaxValueDepth);
    ojson out = ojson::array();
    for (int64_t i = 0; i < n; ++i)
      for (const auto& x : s.v) out.push_back(x);
    return J(std::move(out));
  }
};

}  // namespace
}  // namespace jinja

ChatTemplate::ChatTemplate(const std::string& source)
    : body_(std::make_unique<std::vector<jinja::Node>>(jinja::parse(source))) {}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

namespace {
// The caller's values are printed, compared and copied recursively, like the template's own.
void check_depth(const nlohmann::ordered_json& v, int depth) {
  if (!v.is_structured()) return;
  ERNIE_CHECK(depth > 0, "chat template context: a value nested deeper than ", std::to_string(jinja::kMaxValueDepth),
              " levels (the depth limit)");
  for (const auto& x : v) check_depth(x, depth - 1);
}
}  // namespace

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  ERNIE_CHECK(context.is_object(), "chat template context must be an object, not ", context.type_name());
  check_depth(context, jinja::kMaxValueDepth);
  jinja::Renderer r(context);
  return r.run(*body_);
}

std::string render_chat_template(const std::string& tmpl, const nlohmann::ordered_json& context) {
  return ChatTemplate(tmpl).render(context);
}

std::string render_chat_template(const std::string& tmpl, const nlohmann::json& context) {
  return ChatTemplate(tmpl).render(nlohmann::ordered_json::parse(context.dump()));
}

nlohmann::ordered_json chat_template_context(const nlohmann::ordered_json& messages,
                                             const nlohmann::ordered_json& tokenizer_config,
                                             bool add_generation_prompt) {
  ERNIE_CHECK(messages.is_array(), "chat messages must be a list");
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = messages;
  ctx["tools"] = nullptr;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = add_generation_prompt;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    auto it = tokenizer_config.find(key);
    if (it == tokenizer_config.end() || it->is_null()) continue;
    if (it->is_string()) ctx[key] = *it;
    else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) ctx[key] = (*it)["content"];
    else fail("tokenizer_config.json: '", key, "' must be a string or an object with \"content\"");
  }
  return ctx;
}

std::string select_chat_template(const std::optional<std::string>& jinja_file, const nlohmann::json& tokenizer_config,
                                 const std::string& where) {
  if (jinja_file) return *jinja_file;
  if (tokenizer_config.is_object()) {
    auto it = tokenizer_config.find("chat_template");
    if (it != tokenizer_config.end() && it->is_string()) return it->get<std::string>();
    if (it != tokenizer_config.end() && it->is_array()) {
      for (const auto& t : *it)
        if (t.is_object() && t.value("name", "") == "default" && t.contains("template") && t["template"].is_string())
          return t["template"].get<std::string>();
    }
  }
  fail(where, ": no chat template (neither chat_template.jinja nor a \"chat_template\" in tokenizer_config.json)");
}

std::string load_chat_template(const std::string& tokenizer_dir) {
  namespace fs = std::filesystem;
  std::optional<std::string> jinja;
  fs::path jinja_file = fs::path(tokenizer_dir) / "chat_template.jinja";
  // A regular file of at most 16 MiB (real templates are a few KiB): a FIFO or a device here is an error.
  if (fs::exists(jinja_file)) jinja = read_regular_file(jinja_file.string(), size_t(16) << 20);
  fs::path cfg_path = fs::path(tokenizer_dir) / "tokenizer_config.json";
  nlohmann::json cfg = (!jinja && fs::exists(cfg_path)) ? read_json_file(cfg_path.string()) : nlohmann::json();
  return select_chat_template(jinja, cfg, tokenizer_dir);
}

}  // namespace ernie
