#include "text/regex.h"

#include <pcre2.h>

#include <cctype>

#include "core/error.h"
#include "text/unicode.h"

namespace ernie::text {

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

namespace {

std::string pcre2_message(int rc) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(rc, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

// Oniguruma's \s is Unicode White_Space; PCRE2's (with UCP) also matches U+180E. Rewrite \s and \S.
std::string onig_compatible(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 16);
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      char c = p[++i];
      if (c == 's') out += "\\p{White_Space}";
      else if (c == 'S') out += "\\P{White_Space}";
      else {
        out += '\\';
        out += c;
      }
    } else {
      out += p[i];
    }
  }
  return out;
}

struct MatchData {
  pcre2_match_data* md;
  explicit MatchData(const pcre2_code* c) : md(pcre2_match_data_create_from_pattern(c, nullptr)) {
    if (!md) throw OutOfMemory("regex: out of memory for match data");
  }
  ~MatchData() { pcre2_match_data_free(md); }
};

// One match attempt from `start`; returns false when there is none. Falls back from the JIT to the
// interpreter when the JIT's stack runs out; any other failure is an Error naming the pattern.
bool match_at(const pcre2_code* code, std::string_view text, size_t start, pcre2_match_data* md,
              const std::string& what, size_t* b, size_t* e) {
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc = pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
    rc = pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) fail(what, ": regex match failed: ", pcre2_message(rc));
  PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  *b = ov[0];
  *e = ov[1];
  if (*e < *b) fail(what, ": regex match ends before it starts (\\K in a lookahead is not supported)");
  return true;
}

}  // namespace

Regex::Regex(std::string_view pattern, const std::string& what) : what_(what) {
  std::string p = onig_compatible(pattern);
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* c = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), PCRE2_UTF | PCRE2_UCP, &err, &off,
                                nullptr);
  if (!c)
    fail(what, ": invalid regex at offset ", std::to_string(off), ": ", pcre2_message(err), " (pattern: ",
         std::string(pattern), ")");
  auto code = std::make_shared<Code>();
  code->code = c;
  pcre2_jit_compile(c, PCRE2_JIT_COMPLETE);  // when the JIT is unavailable, matching uses the interpreter
  code_ = std::move(code);
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  MatchData md(code_->code);
  size_t pos = 0, b = 0, e = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (pos <= text.size()) {
    if (!match_at(code_->code, text, pos, md.md, what_, &b, &e)) break;
    if (b == e && have_last && last_end == e) {
      pos += pos < text.size() ? utf8_len(static_cast<unsigned char>(text[pos])) : 1;
      continue;
    }
    out.emplace_back(b, e);
    pos = e;
    last_end = e;
    have_last = true;
  }
  return out;
}

bool Regex::search(std::string_view text) const {
  MatchData md(code_->code);
  size_t b = 0, e = 0;
  return match_at(code_->code, text, 0, md.md, what_, &b, &e);
}

std::string regex_escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u) && c != '_' && c != ' ') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace ernie::text
