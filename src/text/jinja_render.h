// The renderer of a parsed template (jinja_ast.h): statements and expressions in jinja_render.cpp, the
// built-in functions, methods, filters and tests in jinja_builtins.cpp. Internal to src/text/.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "text/jinja_ast.h"
#include "text/jinja_value.h"

namespace ernie::jinja {

constexpr int64_t kMaxIterations = 100'000;
constexpr size_t kMaxOutput = size_t(256) << 20;
constexpr size_t kMaxSequence = 1'000'000;

// Bytes (as footprint() counts them) that one render may copy into new lists, dicts and namespaces. Real
// templates copy a few messages; 32 MiB is thousands of times that.
constexpr size_t kMaxBuilt = size_t(32) << 20;

enum class Flow { Normal, Break, Continue };

class Renderer {
 public:
  Renderer(const ojson& globals) : globals_(globals) { frames_.emplace_back(); }

  std::string run(const Body& body);

 private:
  const ojson& globals_;
  std::vector<std::map<std::string, Value>> frames_;
  std::string out_;
  int64_t iterations_ = 0;
  int loop_depth_ = 0;
  size_t built_ = 0;  // bytes adopt() let into new values so far

  // `v` copied `times` times into a new list, dict or namespace (see jinja_render.cpp).
  const ojson& adopt(const ojson& v, Pos p, size_t times = 1, int depth = kMaxValueDepth - 1);

  // ---- statements ----

  Flow exec(const Body& body);

  void emit(const std::string& s, Pos p);

  Flow exec(const Node& n);

  std::vector<ojson> iterate(const Value& it, Pos p);

  [[gnu::noinline]] void exec_set(const Node& n);

  [[gnu::noinline]] Flow exec_for(const Node& n);

  // ---- names ----

  Value* lookup_ref(const std::string& name);

  Value lookup(const std::string& name);

  // ---- expressions ----

  Value eval(const Expr& e);

  static const Value& defined(const Value& v, Pos p);

  [[gnu::noinline]] Value list(const Expr& e);
  [[gnu::noinline]] Value dict(const Expr& e);
  [[gnu::noinline]] Value get_attr(const Expr& e);
  [[gnu::noinline]] Value get_item(const Expr& e);

  [[gnu::noinline]] Value get_attr(const Value& obj, const std::string& name, Pos p);

  [[gnu::noinline]] Value get_item(const Value& obj, const Value& key, Pos p);

  [[gnu::noinline]] Value slice(const Expr& e);

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

  Args eval_args(const Expr& e, size_t first);

  static void check_arity(const Args& a, size_t lo, size_t hi, const std::string& what, Pos p,
                          std::initializer_list<const char*> kwnames = {});

  std::string str_arg(const Args& a, size_t i, const std::string& name, const std::string& what, Pos p);

  [[gnu::noinline]] Value call(const Expr& e);

  [[gnu::noinline]] Value function(const Expr& callee, const Args& a, const Expr& e);

  Value range(const Args& a, Pos p);

  [[gnu::noinline]] Value method(const Value& obj, const std::string& m, const Args& a, Pos p);

  static ojson split(const std::string& s, const Args& a, const std::string& what, Pos p);

  static std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count,
                             Pos p);

  // ---- filters ----

  [[gnu::noinline]] Value filter(const Expr& e);

  [[gnu::noinline]] Value apply_filter(const Expr& e, Value x, const Args& a);

  // ---- tests ----

  [[gnu::noinline]] bool test(const Expr& e);

  [[gnu::noinline]] bool apply_test(const Expr& e, const Value& x, const Args& a);

  // ---- operators ----

  [[gnu::noinline]] Value unary(const Expr& e);

  [[noreturn]] static void bad_operands(const std::string& op, const Value& a, const Value& b, Pos p);

  [[gnu::noinline]] Value binary(const Expr& e);

  [[gnu::noinline]] Value binary_op(const std::string& op, const Value& a, const Value& b, Pos p);

  bool contains(const Value& hay, const Value& needle, Pos p);

  Value arith(const std::string& op, const Value& a, const Value& b, Pos p);

  Value repeat(const Value& s, int64_t n, Pos p);
};

}  // namespace ernie::jinja
