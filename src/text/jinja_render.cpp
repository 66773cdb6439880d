// Statements, names, expressions and operators of the renderer, with Python's value semantics.
#include "text/jinja_render.h"

#include <climits>
#include <cmath>

#include "text/py_str.h"

namespace ernie::jinja {

std::string Renderer::run(const Body& body) {
  exec(body);
  return std::move(out_);
}

// `v` copied `times` times into a new list, dict or namespace. Such values stay within kMaxValueDepth, and
// all of them together, over the whole render, within kMaxBuilt: `{% set ns.x = [ns.x] %}` in a loop would
// nest deeper every turn, `{% set ns.x = [ns.x, ns.x] %}` would double its size.
const ojson& Renderer::adopt(const ojson& v, Pos p, size_t times, int depth) {
  const size_t left = times > 0 ? (kMaxBuilt - built_) / times : kMaxBuilt;
  const size_t n = footprint(v, depth, left, p);
  if (times > 0 && n > left)
    error_at(p, "the template built values of more than " + std::to_string(kMaxBuilt >> 20) + " MiB (the size limit)");
  built_ += n * times;
  return v;
}

Flow Renderer::exec(const Body& body) {
  for (const Node& n : body) {
    Flow f = exec(n);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

void Renderer::emit(const std::string& s, Pos p) {
  out_ += s;
  if (out_.size() > kMaxOutput) error_at(p, "output is larger than 256 MiB");
}

Flow Renderer::exec(const Node& n) {
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

std::vector<ojson> Renderer::iterate(const Value& it, Pos p) {
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
void Renderer::exec_set(const Node& n) {
  Value v = eval(*n.expr);
  if (!n.set_attr) {
    frames_.back()[n.targets[0]] = std::move(v);
    return;
  }
  Value* ns = lookup_ref(n.targets[0]);
  if (!ns || ns->k != Value::Namespace)
    error_at(n.pos,
             "'set " + n.targets[0] + "." + n.targets[1] + "' needs '" + n.targets[0] + "' to be a namespace() object");
  adopt(v.v, n.pos);
  ns->v[n.targets[1]] = std::move(v.v);
}

Flow Renderer::exec_for(const Node& n) {
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

Value* Renderer::lookup_ref(const std::string& name) {
  for (auto f = frames_.rbegin(); f != frames_.rend(); ++f) {
    auto it = f->find(name);
    if (it != f->end()) return &it->second;
  }
  return nullptr;
}

Value Renderer::lookup(const std::string& name) {
  if (Value* v = lookup_ref(name)) return *v;
  if (globals_.is_object()) {
    auto it = globals_.find(name);
    if (it != globals_.end()) return J(*it);
  }
  return Value::undefined();
}

Value Renderer::eval(const Expr& e) {
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

const Value& Renderer::defined(const Value& v, Pos p) {
  if (v.undef()) error_at(p, "value is undefined");
  return v;
}

Value Renderer::list(const Expr& e) {
  ojson l = ojson::array();
  for (const auto& a : e.args) {
    Value v = eval(*a);
    l.push_back(adopt(defined(v, a->pos).v, a->pos));
  }
  return J(std::move(l));
}

Value Renderer::dict(const Expr& e) {
  ojson d = ojson::object();
  for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
    Value k = eval(*e.args[i]);
    if (!is_str(k)) error_at(e.args[i]->pos, "dict keys must be strings here, not " + type_name(k));
    Value v = eval(*e.args[i + 1]);
    d[as_str(k)] = adopt(defined(v, e.args[i + 1]->pos).v, e.args[i + 1]->pos);
  }
  return J(std::move(d));
}

Value Renderer::get_attr(const Expr& e) {
  Value obj = eval(*e.args[0]);
  return get_attr(obj, e.name, e.pos);
}

Value Renderer::get_item(const Expr& e) {
  Value obj = eval(*e.args[0]);
  Value key = eval(*e.args[1]);
  return get_item(obj, key, e.pos);
}

Value Renderer::get_attr(const Value& obj, const std::string& name, Pos p) {
  if (obj.undef()) error_at(p, "cannot read attribute '" + name + "' of an undefined value");
  if (obj.v.is_object()) {
    auto it = obj.v.find(name);
    return it == obj.v.end() ? Value::undefined() : J(*it);
  }
  return Value::undefined();
}

Value Renderer::get_item(const Value& obj, const Value& key, Pos p) {
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

Value Renderer::slice(const Expr& e) {
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

Renderer::Args Renderer::eval_args(const Expr& e, size_t first) {
  Args a;
  for (size_t i = first; i < e.args.size(); ++i) a.pos.push_back(eval(*e.args[i]));
  for (const auto& [k, x] : e.kwargs) a.kw.emplace_back(k, eval(*x));
  return a;
}

Value Renderer::call(const Expr& e) {
  const Expr& callee = *e.args[0];
  Args a = eval_args(e, 1);
  if (callee.kind == Expr::Name && !lookup_ref(callee.name)) return function(callee, a, e);
  if (callee.kind == Expr::GetAttr) {
    Value obj = eval(*callee.args[0]);
    return method(obj, callee.name, a, e.pos);
  }
  error_at(e.pos, "this expression cannot be called");
}

Value Renderer::unary(const Expr& e) {
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

void Renderer::bad_operands(const std::string& op, const Value& a, const Value& b, Pos p) {
  error_at(p, "unsupported operand types for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
}

Value Renderer::binary(const Expr& e) {
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

Value Renderer::binary_op(const std::string& op, const Value& a, const Value& b, Pos p) {
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

bool Renderer::contains(const Value& hay, const Value& needle, Pos p) {
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

Value Renderer::arith(const std::string& op, const Value& a, const Value& b, Pos p) {
  if (is_num(a) && is_num(b)) {
    bool ints = is_int(a) && is_int(b);
    if (ints && op != "/") {
      int64_t x = as_int(a.v), y = as_int(b.v), r = 0;
      bool ovf = false;
      if (op == "+")
        ovf = __builtin_add_overflow(x, y, &r);
      else if (op == "-")
        ovf = __builtin_sub_overflow(x, y, &r);
      else if (op == "*")
        ovf = __builtin_mul_overflow(x, y, &r);
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

Value Renderer::repeat(const Value& s, int64_t n, Pos p) {
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

}  // namespace ernie::jinja
