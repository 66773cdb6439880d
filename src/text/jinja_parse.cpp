// Parser of the Jinja subset (see chat_template.h for the list): tokens (jinja_lex.h) to the tree of
// jinja_ast.h, with the depth limits checked as it recurses.
#include <algorithm>
#include <set>

#include "core/error.h"
#include "text/jinja_ast.h"
#include "text/jinja_lex.h"

namespace ernie::jinja {
namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Body parse_template() {
    std::string stop;
    return parse_body({}, "", {}, &stop);
  }

 private:
  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;        // nesting of sub-expressions being parsed (the recursion of parse_expression)
  int block_depth_ = 0;  // {% if %} / {% for %} blocks open around the current position

  static Node mk(Node::Kind k, Pos p) {
    Node n;
    n.kind = k;
    n.pos = p;
    return n;
  }

  const Token& peek(size_t k = 0) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  const Token& next() {
    const Token& t = peek();
    if (i_ < t_.size() - 1) ++i_;
    return t;
  }
  bool is_op(const std::string& op, size_t k = 0) const { return peek(k).type == T::Op && peek(k).text == op; }
  bool is_name(const std::string& n, size_t k = 0) const { return peek(k).type == T::Name && peek(k).text == n; }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case T::Text: return "text";
      case T::VarBegin: return "'{{'";
      case T::VarEnd: return "'}}'";
      case T::BlockBegin: return "'{%'";
      case T::BlockEnd: return "'%}'";
      case T::Name: return "'" + t.text + "'";
      case T::Int:
      case T::Float: return "number " + t.text;
      case T::String: return "a string";
      case T::Op: return "'" + t.text + "'";
      case T::End: return "the end of the template";
    }
    return "?";
  }

  void expect_op(const std::string& op) {
    if (!is_op(op)) error_at(peek().pos, "expected '" + op + "', found " + describe(peek()));
    next();
  }
  void expect(T type, const std::string& what) {
    if (peek().type != type) error_at(peek().pos, "expected " + what + ", found " + describe(peek()));
    next();
  }
  std::string expect_name() {
    if (peek().type != T::Name) error_at(peek().pos, "expected a name, found " + describe(peek()));
    return next().text;
  }

  // ---- statements ----

  // Parses nodes until a `{% <stop> %}` tag (consumes "{%" and the stop word) or the end of the template.
  Body parse_body(const std::set<std::string>& stops, const std::string& opener, Pos opener_pos, std::string* stopped) {
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.type == T::End) {
        if (!stops.empty())
          error_at(opener_pos, "'" + opener + "' is never closed (expected {% " + *stops.rbegin() + " %})");
        return body;
      }
      if (t.type == T::Text) {
        Node n = mk(Node::Text, t.pos);
        n.text = next().text;
        body.push_back(std::move(n));
      } else if (t.type == T::VarBegin) {
        Node n = mk(Node::Output, t.pos);
        next();
        n.expr = parse_expression();
        expect(T::VarEnd, "'}}'");
        body.push_back(std::move(n));
      } else if (t.type == T::BlockBegin) {
        const Token& w = peek(1);
        if (w.type == T::Name && stops.count(w.text)) {
          next();
          *stopped = next().text;
          return body;
        }
        parse_statement(body);
      } else {
        error_at(t.pos, "unexpected " + describe(t));
      }
    }
  }

  // One more open {% if %} or {% for %} for the guard's lifetime; deeper than kMaxBlockDepth is an error.
  struct BlockGuard {
    Parser& p;
    BlockGuard(Parser& p_, Pos at) : p(p_) {
      if (++p.block_depth_ > kMaxBlockDepth) {
        --p.block_depth_;
        error_at(at, "blocks nested deeper than " + std::to_string(kMaxBlockDepth) + " levels (the depth limit)");
      }
    }
    ~BlockGuard() { --p.block_depth_; }
  };

  [[gnu::noinline]] void parse_statement(Body& body) {
    Pos at = next().pos;  // "{%"
    if (peek().type != T::Name) error_at(peek().pos, "expected a tag name after '{%', found " + describe(peek()));
    const Token& w = next();
    const std::string& word = w.text;
    if (word == "set") {
      body.push_back(parse_set(at));
    } else if (word == "if") {
      BlockGuard g(*this, at);
      body.push_back(parse_if(at));
    } else if (word == "for") {
      BlockGuard g(*this, at);
      body.push_back(parse_for(at));
    } else if (word == "break" || word == "continue") {
      expect(T::BlockEnd, "'%}'");
      body.push_back(mk(word == "break" ? Node::Break : Node::Continue, at));
    } else if (word == "generation" || word == "endgeneration") {
      expect(T::BlockEnd, "'%}'");  // transformers' assistant-mask marker: renders nothing
    } else if (word == "elif" || word == "else" || word == "endif" || word == "endfor") {
      error_at(w.pos, "unexpected '{% " + word + " %}' with no open block it could belong to");
    } else {
      error_at(w.pos,
               "unsupported tag '" + word + "' (supported: set, if/elif/else/endif, for/else/endfor, break, continue)");
    }
  }

  [[gnu::noinline]] Node parse_set(Pos at) {
    Node n = mk(Node::Set, at);
    n.targets.push_back(expect_name());
    if (is_op(".")) {
      next();
      n.targets.push_back(expect_name());
      n.set_attr = true;
    }
    if (is_op(",")) error_at(peek().pos, "'set' with several targets is not supported");
    if (peek().type == T::BlockEnd) error_at(peek().pos, "block 'set' ({% set x %}...{% endset %}) is not supported");
    expect_op("=");
    n.expr = parse_expression();
    expect(T::BlockEnd, "'%}'");
    return n;
  }

  // The stop words live outside the frames: parse_body -> parse_statement -> parse_if/parse_for recurse once
  // per nested block, so their frames are kept small (they are large under sanitizers).
  static inline const std::set<std::string> kIfStops = {"elif", "else", "endif"}, kEndif = {"endif"},
                                            kForStops = {"else", "endfor"}, kEndfor = {"endfor"};
  static inline const std::string kIfName = "{% if %}", kForName = "{% for %}";

  [[gnu::noinline]] Node parse_if(Pos at) {
    Node n = mk(Node::If, at);
    ExprP cond = parse_expression();
    expect(T::BlockEnd, "'%}'");
    while (true) {
      std::string stop;
      Body b = parse_body(kIfStops, kIfName, at, &stop);
      n.branches.emplace_back(std::move(cond), std::move(b));
      if (stop == "elif") {
        cond = parse_expression();
        expect(T::BlockEnd, "'%}'");
      } else if (stop == "else") {
        expect(T::BlockEnd, "'%}'");
        std::string end;
        Body eb = parse_body(kEndif, kIfName, at, &end);
        n.branches.emplace_back(nullptr, std::move(eb));
        expect(T::BlockEnd, "'%}'");
        return n;
      } else {
        expect(T::BlockEnd, "'%}'");
        return n;
      }
    }
  }

  [[gnu::noinline]] Node parse_for(Pos at) {
    Node n = mk(Node::For, at);
    n.targets.push_back(expect_name());
    while (is_op(",")) {
      next();
      n.targets.push_back(expect_name());
    }
    if (!is_name("in")) error_at(peek().pos, "expected 'in' in a for loop, found " + describe(peek()));
    next();
    n.expr = parse_or();
    if (is_name("if")) {
      next();
      n.loop_filter = parse_or();
    }
    if (is_name("recursive")) error_at(peek().pos, "recursive for loops are not supported");
    expect(T::BlockEnd, "'%}'");
    std::string stop;
    n.body = parse_body(kForStops, kForName, at, &stop);
    if (stop == "else") {
      expect(T::BlockEnd, "'%}'");
      n.else_body = parse_body(kEndfor, kForName, at, &stop);
    }
    expect(T::BlockEnd, "'%}'");
    return n;
  }

  // ---- expressions (Jinja's precedence, lowest first) ----

  // Two bounds keep every recursion over an expression bounded: DepthGuard bounds the parser's own recursion
  // to kMaxExprNesting (each nested sub-expression: parentheses, brackets, arguments, subscripts, a `not` or
  // sign; about ten frames each), and seal() bounds to kMaxExprDepth the height of the tree it builds, which
  // loops can grow without recursing (a + b + c ..., x | f | g ..., x.a.b[0] ...), and which the renderer
  // and the destructor walk recursively.
  [[noreturn]] static void too_deep(Pos p) {
    error_at(p, "expression more than " + std::to_string(kMaxExprDepth) +
                    " levels deep (the depth limit: each operator, filter, call or subscript in a chain adds one)");
  }
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& p_) : p(p_) {
      if (++p.depth_ > kMaxExprNesting) {
        --p.depth_;
        error_at(p.peek().pos, "expression nested deeper than " + std::to_string(kMaxExprNesting) +
                                   " levels (the depth limit for brackets, arguments, subscripts and unary operators)");
      }
    }
    ~DepthGuard() { --p.depth_; }
  };

  static ExprP make(Expr::Kind k, Pos p) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->pos = p;
    return e;
  }
  // Called on every node once its children are in: records its height, rejects one over the limit.
  static ExprP seal(ExprP e) {
    int h = 0;
    auto child = [&](const ExprP& c) {
      if (!c) return;
      ERNIE_CHECK(c->depth > 0, "chat template parser: an expression node was not sealed");
      h = std::max(h, c->depth);
    };
    for (const ExprP& a : e->args) child(a);
    for (const auto& kv : e->kwargs) child(kv.second);
    e->depth = h + 1;
    if (e->depth > kMaxExprDepth) too_deep(e->pos);
    return e;
  }
  static ExprP binary(const std::string& op, ExprP a, ExprP b, Pos p) {
    ExprP e = make(Expr::Binary, p);
    e->name = op;
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return seal(std::move(e));
  }

  ExprP parse_expression() {
    DepthGuard g(*this);
    ExprP e = parse_or();
    if (is_name("if")) {
      Pos p = next().pos;
      ExprP c = make(Expr::Cond, p);
      c->args.push_back(std::move(e));
      c->args.push_back(parse_or());
      if (is_name("else")) {
        next();
        c->args.push_back(parse_expression());
      } else {
        c->args.push_back(nullptr);
      }
      return seal(std::move(c));
    }
    return e;
  }

  ExprP parse_or() {
    ExprP e = parse_and();
    while (is_name("or")) {
      Pos p = next().pos;
      e = binary("or", std::move(e), parse_and(), p);
    }
    return e;
  }
  ExprP parse_and() {
    ExprP e = parse_not();
    while (is_name("and")) {
      Pos p = next().pos;
      e = binary("and", std::move(e), parse_not(), p);
    }
    return e;
  }
  ExprP parse_not() {
    if (is_name("not")) {
      DepthGuard g(*this);
      Pos p = next().pos;
      ExprP e = make(Expr::Unary, p);
      e->name = "not";
      e->args.push_back(parse_not());
      return seal(std::move(e));
    }
    return parse_compare();
  }
  ExprP parse_compare() {
    ExprP e = parse_math1();
    bool compared = false;
    while (true) {
      std::string op;
      Pos p = peek().pos;
      if (peek().type == T::Op && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                   peek().text == ">" || peek().text == "<=" || peek().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        op = "not in";
      } else {
        return e;
      }
      if (compared) error_at(p, "chained comparisons (a < b < c) are not supported; use 'and'");
      compared = true;
      e = binary(op, std::move(e), parse_math1(), p);
    }
  }
  ExprP parse_math1() {
    ExprP e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      e = binary(t.text, std::move(e), parse_concat(), t.pos);
    }
    return e;
  }
  ExprP parse_concat() {
    ExprP e = parse_math2();
    while (is_op("~")) {
      Pos p = next().pos;
      e = binary("~", std::move(e), parse_math2(), p);
    }
    return e;
  }
  ExprP parse_math2() {
    ExprP e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      e = binary(t.text, std::move(e), parse_pow(), t.pos);
    }
    return e;
  }
  ExprP parse_pow() {
    ExprP e = parse_unary(true);
    while (is_op("**")) {
      Pos p = next().pos;
      e = binary("**", std::move(e), parse_unary(true), p);
    }
    return e;
  }
  ExprP parse_unary(bool with_filter) {
    ExprP e;
    if (is_op("-") || is_op("+")) {
      DepthGuard g(*this);
      const Token& t = next();
      e = make(Expr::Unary, t.pos);
      e->name = t.text;
      e->args.push_back(parse_unary(false));
      e = seal(std::move(e));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filters(std::move(e));
    return e;
  }

  ExprP parse_primary() {
    const Token& t = peek();
    switch (t.type) {
      case T::Name: {
        next();
        ExprP e = make(Expr::Literal, t.pos);
        if (t.text == "true" || t.text == "True")
          e->value = true;
        else if (t.text == "false" || t.text == "False")
          e->value = false;
        else if (t.text == "none" || t.text == "None")
          e->value = nullptr;
        else {
          e->kind = Expr::Name;
          e->name = t.text;
        }
        return seal(std::move(e));
      }
      case T::String: {
        ExprP e = make(Expr::Literal, t.pos);
        std::string s;
        while (peek().type == T::String) s += next().text;  // adjacent literals concatenate
        e->value = s;
        return seal(std::move(e));
      }
      case T::Int:
      case T::Float: {
        next();
        ExprP e = make(Expr::Literal, t.pos);
        e->value = t.number;
        return seal(std::move(e));
      }
      case T::Op:
        if (t.text == "(") {
          next();
          ExprP e = parse_expression();
          if (is_op(",")) {  // a tuple: behaves as a list here
            ExprP l = make(Expr::List, t.pos);
            l->args.push_back(std::move(e));
            while (is_op(",")) {
              next();
              if (is_op(")")) break;
              l->args.push_back(parse_expression());
            }
            e = seal(std::move(l));
          }
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          next();
          ExprP l = make(Expr::List, t.pos);
          while (!is_op("]")) {
            l->args.push_back(parse_expression());
            if (!is_op(",")) break;
            next();
          }
          expect_op("]");
          return seal(std::move(l));
        }
        if (t.text == "{") {
          next();
          ExprP d = make(Expr::Dict, t.pos);
          while (!is_op("}")) {
            d->args.push_back(parse_expression());
            expect_op(":");
            d->args.push_back(parse_expression());
            if (!is_op(",")) break;
            next();
          }
          expect_op("}");
          return seal(std::move(d));
        }
        break;
      default: break;
    }
    error_at(t.pos, "expected an expression, found " + describe(t));
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (peek().type == T::Name && is_op("=", 1)) {
        std::string k = next().text;
        next();
        e.kwargs.emplace_back(k, parse_expression());
      } else {
        if (!e.kwargs.empty()) error_at(peek().pos, "positional argument after a keyword argument");
        e.args.push_back(parse_expression());
      }
      if (!is_op(",")) break;
      next();
    }
    expect_op(")");
  }

  [[gnu::noinline]] ExprP parse_postfix(ExprP e) {
    while (true) {
      if (is_op(".")) {
        Pos p = next().pos;
        if (peek().type == T::Int) {  // x.0 is x[0]
          ExprP g = make(Expr::GetItem, p);
          ExprP idx = make(Expr::Literal, peek().pos);
          idx->value = next().number;
          g->args.push_back(std::move(e));
          g->args.push_back(seal(std::move(idx)));
          e = seal(std::move(g));
          continue;
        }
        ExprP g = make(Expr::GetAttr, p);
        g->name = expect_name();
        g->args.push_back(std::move(e));
        e = seal(std::move(g));
      } else if (is_op("[")) {
        Pos p = next().pos;
        ExprP parts[3];
        bool slice = false;
        if (!is_op(":")) parts[0] = parse_expression();
        for (int k = 1; k < 3 && is_op(":"); ++k) {
          next();
          slice = true;
          if (!is_op(":") && !is_op("]")) parts[k] = parse_expression();
        }
        expect_op("]");
        ExprP g = make(slice ? Expr::Slice : Expr::GetItem, p);
        g->args.push_back(std::move(e));
        if (!slice && !parts[0]) error_at(p, "empty subscript");
        g->args.push_back(std::move(parts[0]));
        if (slice) {
          g->args.push_back(std::move(parts[1]));
          g->args.push_back(std::move(parts[2]));
        }
        e = seal(std::move(g));
      } else if (is_op("(")) {
        ExprP c = make(Expr::Call, peek().pos);
        c->args.push_back(std::move(e));
        parse_call_args(*c);
        e = seal(std::move(c));
      } else {
        return e;
      }
    }
  }

  [[gnu::noinline]] ExprP parse_filters(ExprP e) {
    while (true) {
      if (is_op("|")) {
        Pos p = next().pos;
        ExprP f = make(Expr::Filter, p);
        f->name = expect_name();
        f->args.push_back(std::move(e));
        if (is_op("(")) parse_call_args(*f);
        e = seal(std::move(f));
      } else if (is_name("is")) {
        Pos p = next().pos;
        ExprP t = make(Expr::Test, p);
        if (is_name("not")) {
          next();
          t->negated = true;
        }
        t->name = expect_name();
        t->args.push_back(std::move(e));
        if (is_op("(")) {
          parse_call_args(*t);
        } else {
          const Token& a = peek();
          static const std::set<std::string> stop = {"else", "or", "and", "if", "in", "is", "not"};
          bool arg = a.type == T::String || a.type == T::Int || a.type == T::Float ||
                     (a.type == T::Name && !stop.count(a.text));
          if (arg) t->args.push_back(parse_primary());
        }
        e = seal(std::move(t));
      } else {
        return e;
      }
    }
  }
};

}  // namespace

Body parse(const std::string& source) {
  Parser p(lex(source));
  return p.parse_template();
}

}  // namespace ernie::jinja
