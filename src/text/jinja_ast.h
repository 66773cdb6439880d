// The parsed form of a Jinja template (the subset chat templates use); internal to src/text/.
// jinja_lex.cpp tokenises (with whitespace control), jinja_parse.cpp builds the tree,
// jinja_render.cpp and jinja_builtins.cpp evaluate it.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ernie::jinja {

struct Pos {
  int line = 1, col = 1;
};

// "chat template line 3, column 14: <what>"
[[noreturn]] void error_at(Pos p, const std::string& what);

// Depth limits: templates come from downloaded model files, so every recursion over them (the parser,
// the renderer, the tree's destructor) is bounded. Real chat templates stay far below these (a few
// levels of blocks, expressions a few dozen levels deep); the parser rejects anything deeper with an
// Error naming line and column, so a tree it returns is at most this deep.
constexpr int kMaxBlockDepth = 128;    // {% if %} / {% for %} blocks inside one another
constexpr int kMaxExprDepth = 256;     // height of one expression's tree (a + b + c ... adds one per operator)
constexpr int kMaxExprNesting = 128;   // sub-expressions inside one another as the parser recurses into them:
                                       // ( ), [ ], { }, arguments, subscripts, `not`, unary signs, `else` arms
// Values the renderer builds ([x], {'k': x}, namespace(a=x) in a loop) nest at most this deep.
constexpr int kMaxValueDepth = 512;

struct Expr;
using ExprP = std::unique_ptr<Expr>;

struct Expr {
  enum Kind {
    Literal,   // value
    Name,      // name
    List,      // args = items
    Dict,      // args = key, value, key, value, ...
    GetAttr,   // args[0] . name
    GetItem,   // args[0] [ args[1] ]
    Slice,     // args[0] [ args[1] : args[2] : args[3] ]  (missing parts are null)
    Call,      // args[0] ( args[1..] , kwargs )
    Filter,    // args[0] | name ( args[1..], kwargs )
    Test,      // args[0] is [not] name ( args[1..] )
    Unary,     // op args[0]: "-", "+", "not"
    Binary,    // args[0] op args[1]: + - * / // % ** ~ == != < > <= >= in "not in" and or
    Cond,      // args[0] if args[1] else args[2] (args[2] null: undefined)
  };
  Kind kind = Literal;
  Pos pos;
  nlohmann::ordered_json value;  // Literal
  std::string name;              // Name, GetAttr, Filter, Test; the operator for Unary/Binary
  bool negated = false;          // Test: "is not"
  int depth = 0;                 // height of this subtree (1 for a leaf), set by the parser; <= kMaxExprDepth
  std::vector<ExprP> args;
  std::vector<std::pair<std::string, ExprP>> kwargs;  // Call, Filter
};

struct Node;
using Body = std::vector<Node>;

struct Node {
  enum Kind { Text, Output, Set, If, For, Break, Continue };
  Kind kind = Text;
  Pos pos;
  std::string text;                  // Text
  ExprP expr;                        // Output, Set (value), For (iterable)
  std::vector<std::string> targets;  // Set: [name] or [namespace, attribute]; For: loop variables
  bool set_attr = false;             // Set: `set ns.attr = ...`
  std::vector<std::pair<ExprP, Body>> branches;  // If: (condition or null for else, body)
  ExprP loop_filter;                 // For: `for x in xs if cond`
  Body body, else_body;              // For
};

// Parses a template with HF's settings: trim_blocks and lstrip_blocks on, one trailing newline dropped,
// newlines normalised to "\n". Throws Error naming line and column on anything outside the subset.
Body parse(const std::string& source);

}  // namespace ernie::jinja
