// Lexer of the Jinja subset (see chat_template.h for the list). Whitespace follows the environment
// transformers renders chat templates with: trim_blocks and lstrip_blocks on, `-` and `+` controls on tags,
// "\r\n" and "\r" normalised to "\n", one trailing newline of the source dropped.
#include "text/jinja_lex.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "text/py_str.h"

namespace ernie::jinja {

void error_at(Pos p, const std::string& what) {
  fail("chat template line ", std::to_string(p.line), ", column ", std::to_string(p.col), ": ", what);
}

namespace {

bool ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class Lexer {
 public:
  explicit Lexer(const std::string& raw) {
    size_t bad = 0;
    if (!py::utf8_valid(raw, &bad)) {
      Pos p;
      for (size_t i = 0; i < bad; ++i) {
        if (raw[i] == '\n')
          p = {p.line + 1, 1};
        else if ((static_cast<unsigned char>(raw[i]) & 0xC0) != 0x80)
          ++p.col;
      }
      error_at(p, "the template is not valid UTF-8");
    }
    src_ = raw;
    normalize();
  }

  std::vector<Token> run() {
    size_t pos = 0;
    const size_t n = src_.size();
    while (pos < n) {
      size_t start = next_tag(pos);
      std::string text = src_.substr(pos, (start == std::string::npos ? n : start) - pos);
      if (start == std::string::npos) {
        push_text(text, pos);
        break;
      }
      char kind = src_[start + 1];
      char ctrl = start + 2 < n && (src_[start + 2] == '-' || src_[start + 2] == '+') ? src_[start + 2] : 0;
      if (ctrl == '-') {
        text = py::strip(text, false, true);
      } else if (ctrl != '+' && kind != '{') {  // lstrip_blocks: blocks and comments only
        size_t l = text.rfind('\n');
        l = (l == std::string::npos) ? 0 : l + 1;
        bool line_start = l > 0 || pos == 0 || src_[pos - 1] == '\n';
        bool blank = l < text.size();
        for (size_t i = l; i < text.size(); ++i) blank = blank && ascii_space(text[i]);
        if (line_start && blank) text.resize(l);
      }
      push_text(text, pos);
      size_t p = start + 2 + (ctrl ? 1 : 0);
      char end_ctrl = 0;
      if (kind == '#') {
        size_t e = src_.find("#}", p);
        if (e == std::string::npos) error_at(pos_of(start), "comment '{#' is never closed with '#}'");
        if (e > p && (src_[e - 1] == '-' || src_[e - 1] == '+')) end_ctrl = src_[e - 1];
        pos = e + 2;
      } else {
        toks_.push_back({kind == '{' ? T::VarBegin : T::BlockBegin, "", {}, pos_of(start)});
        pos = lex_tag(p, kind == '{' ? '}' : '%', start, &end_ctrl);
      }
      if (end_ctrl == '-') {
        while (pos < n) {
          size_t q = pos;
          std::vector<char32_t> one;
          char32_t cp = static_cast<unsigned char>(src_[q]);
          if (cp >= 0x80) {
            size_t len = (cp >= 0xF0) ? 4 : (cp >= 0xE0) ? 3 : 2;
            cp = py::utf8_decode(src_.substr(q, len))[0];
            q += len;
          } else {
            ++q;
          }
          if (!py::is_space(cp)) break;
          pos = q;
        }
      } else if (end_ctrl != '+' && kind != '{' && pos < n && src_[pos] == '\n') {
        ++pos;  // trim_blocks
      }
    }
    toks_.push_back({T::End, "", {}, pos_of(n)});
    return std::move(toks_);
  }

 private:
  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> toks_;
  size_t last_off_ = 0;  // pos_of's previous offset and the column it found there
  int last_col_ = 1;

  void normalize() {
    std::string s;
    s.reserve(src_.size());
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\r') {
        s += '\n';
        if (i + 1 < src_.size() && src_[i + 1] == '\n') ++i;
      } else {
        s += src_[i];
      }
    }
    if (!s.empty() && s.back() == '\n') s.pop_back();  // keep_trailing_newline=False
    src_ = std::move(s);
    line_starts_ = {0};
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  // Columns count code points, as an editor shows them. Tokens are made in source order, so the column
  // is counted on from the previous call's offset when that lies on the same line before `off`: counting
  // from the line's start every time made a template on one long line quadratic to lex.
  Pos pos_of(size_t off) {
    off = std::min(off, src_.size());
    size_t line = std::upper_bound(line_starts_.begin(), line_starts_.end(), off) - line_starts_.begin();
    size_t ls = line_starts_[line - 1];
    size_t from = ls;
    int col = 1;
    if (last_off_ >= ls && last_off_ <= off) {
      from = last_off_;
      col = last_col_;
    }
    for (size_t i = from; i < off; ++i)
      if ((static_cast<unsigned char>(src_[i]) & 0xC0) != 0x80) ++col;
    last_off_ = off;
    last_col_ = col;
    return {int(line), col};
  }

  size_t next_tag(size_t pos) const {
    while (true) {
      size_t s = src_.find('{', pos);
      if (s == std::string::npos || s + 1 >= src_.size()) return std::string::npos;
      char c = src_[s + 1];
      if (c == '{' || c == '%' || c == '#') return s;
      pos = s + 1;
    }
  }

  void push_text(const std::string& text, size_t at) {
    if (!text.empty()) toks_.push_back({T::Text, text, {}, pos_of(at)});
  }

  // Tokenises the inside of {{ }} or {% %} from p; returns the offset just after the closing delimiter.
  size_t lex_tag(size_t p, char close, size_t open_at, char* end_ctrl) {
    const size_t n = src_.size();
    int depth = 0;  // open brackets: a '}}' inside a dict literal does not end the tag
    static const char* two_ops[] = {"//", "**", "==", "!=", "<=", ">="};
    while (true) {
      while (p < n && ascii_space(src_[p])) ++p;
      if (p >= n) error_at(pos_of(open_at), std::string("tag is never closed with '") + close + "}'");
      if (depth == 0) {
        for (char c : std::string("-+")) {
          if (src_[p] == c && p + 2 < n && src_[p + 1] == close && src_[p + 2] == '}') {
            if (c == '+' && close == '}') continue;
            *end_ctrl = c;
            toks_.push_back({close == '}' ? T::VarEnd : T::BlockEnd, "", {}, pos_of(p)});
            return p + 3;
          }
        }
        if (src_[p] == close && p + 1 < n && src_[p + 1] == '}') {
          toks_.push_back({close == '}' ? T::VarEnd : T::BlockEnd, "", {}, pos_of(p)});
          return p + 2;
        }
      }
      Pos at = pos_of(p);
      char c = src_[p];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t q = p;
        while (q < n && (std::isalnum(static_cast<unsigned char>(src_[q])) || src_[q] == '_')) ++q;
        toks_.push_back({T::Name, src_.substr(p, q - p), {}, at});
        p = q;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        p = lex_number(p, at);
      } else if (c == '\'' || c == '"') {
        p = lex_string(p, at);
      } else {
        std::string op;
        for (const char* t : two_ops)
          if (src_.compare(p, 2, t) == 0) op = t;
        if (op.empty()) {
          if (std::string("+-*/%~<>=()[]{},.:|").find(c) == std::string::npos)
            error_at(at, std::string("unexpected character '") + c + "' in a tag");
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        toks_.push_back({T::Op, op, {}, at});
        p += op.size();
      }
    }
  }

  size_t lex_number(size_t p, Pos at) {
    const size_t n = src_.size();
    auto digits = [&](size_t q) {
      while (q < n && (std::isdigit(static_cast<unsigned char>(src_[q])) || src_[q] == '_')) ++q;
      return q;
    };
    size_t q = digits(p);
    bool is_float = false;
    if (q + 1 < n && src_[q] == '.' && std::isdigit(static_cast<unsigned char>(src_[q + 1]))) {
      q = digits(q + 1);
      is_float = true;
    }
    if (q < n && (src_[q] == 'e' || src_[q] == 'E')) {
      size_t r = q + 1;
      if (r < n && (src_[r] == '+' || src_[r] == '-')) ++r;
      if (r < n && std::isdigit(static_cast<unsigned char>(src_[r]))) {
        q = digits(r);
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = p; i < q; ++i)
      if (src_[i] != '_') text += src_[i];
    Token t{is_float ? T::Float : T::Int, text, {}, at};
    try {
      if (is_float)
        t.number = std::stod(text);
      else
        t.number = int64_t(std::stoll(text));
    } catch (const std::exception&) {
      error_at(at, "number '" + text + "' is out of range");
    }
    toks_.push_back(std::move(t));
    return q;
  }

  static int hex_val(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // A Python string literal with its escapes (\n \t \r \\ \' \" \b \f \v \a \0 \xNN \uNNNN \UNNNNNNNN);
  // an unknown escape keeps its backslash, as Python does.
  size_t lex_string(size_t p, Pos at) {
    const size_t n = src_.size();
    char q = src_[p++];
    std::string out;
    while (true) {
      if (p >= n) error_at(at, "string literal is never closed");
      char c = src_[p];
      if (c == q) break;
      if (c != '\\') {
        out += c;
        ++p;
        continue;
      }
      if (p + 1 >= n) error_at(at, "string literal is never closed");
      char e = src_[p + 1];
      p += 2;
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case 'a': out += '\a'; break;
        case '0': out += '\0'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          int len = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          for (int k = 0; k < len; ++k) {
            int h = p + k < n ? hex_val(src_[p + k]) : -1;
            if (h < 0) error_at(at, std::string("bad \\") + e + " escape in a string literal");
            cp = cp * 16 + uint32_t(h);
          }
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            error_at(at, "escape in a string literal is not a valid code point");
          py::utf8_append(out, cp);
          p += len;
          break;
        }
        default: out += '\\'; out += e;
      }
    }
    toks_.push_back({T::String, out, {}, at});
    return p + 1;
  }
};

}  // namespace

std::vector<Token> lex(const std::string& source) { return Lexer(source).run(); }

}  // namespace ernie::jinja
