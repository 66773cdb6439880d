// The lexer of the Jinja subset: template text to tokens, with HF's whitespace rules (internal to src/text/).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/jinja_ast.h"

namespace ernie::jinja {

enum class T { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, Int, Float, String, Op, End };

struct Token {
  T type;
  std::string text;  // Text content, name, operator, or the decoded string literal
  nlohmann::ordered_json number;
  Pos pos;
};

// Normalises newlines, drops one trailing newline, applies trim_blocks, lstrip_blocks and the `-`/`+`
// controls, and returns the tokens ending with T::End. Throws Error naming line and column.
std::vector<Token> lex(const std::string& source);

}  // namespace ernie::jinja
