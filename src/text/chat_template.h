// Chat templates: the Jinja subset that real `chat_template.jinja` files use, rendered the way
// transformers' apply_chat_template renders them (trim_blocks, lstrip_blocks, Python semantics for
// values, `tojson` = json.dumps(ensure_ascii=False), `raise_exception`).
//
// Supported:
//   {{ expr }}, {% set x = e %}, {% set ns.attr = e %}, {% if %}/{% elif %}/{% else %}/{% endif %},
//   {% for x in xs [if cond] %}/{% else %}/{% endfor %} (also `for k, v in d.items()`), {% break %},
//   {% continue %}, {# comments #}, whitespace control ({%- -%} {{- -}} {%+ +%}).
//   Literals: strings ('..', ".." with Python escapes), ints, floats, true/false/none (and Python's
//   spellings), lists, tuples (as lists), dicts. Variables, `a.b`, `a['b']`, `a[i]`, `a[i:j:k]`.
//   Operators: + - * / // % ** ~, == != < > <= >=, in, not in, and, or, not, `x if c else y`.
//   Tests: is [not] defined/undefined/none/string/number/integer/float/boolean/mapping/sequence/
//   iterable/true/false/even/odd. loop.index/index0/revindex/revindex0/first/last/length/previtem/nextitem.
//   Filters: trim, length, count, tojson(indent), upper, lower, default/d(value, boolean), join, first,
//   last, string, int, list, items, safe.
//   Methods: str.strip/lstrip/rstrip/upper/lower/startswith/endswith/split/replace,
//   dict.items/keys/values/get. Functions: raise_exception(msg), namespace(k=v, ...), range(...), strftime_now(fmt)
//   (local time, as transformers).
// Not supported (a clear Error naming line and column): macros, call blocks, block set, filters
// blocks, include/import/extends, recursive loops, chained comparisons, string % formatting.
// upper/lower change ASCII letters only.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ernie {

namespace jinja {
struct Node;
}

class ChatTemplate {
 public:
  // Parses once; throws Error ("chat template line L, column C: ...") on syntax outside the subset.
  explicit ChatTemplate(const std::string& source);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  // Renders with `context` as the global variables (an object). Runtime errors (type errors,
  // raise_exception, undefined attribute access) throw Error naming line and column.
  std::string render(const nlohmann::ordered_json& context) const;

 private:
  std::unique_ptr<std::vector<jinja::Node>> body_;
};

// One-shot parse + render. The ordered_json overload keeps dict key order (as Python does); the json
// overload sees keys sorted.
std::string render_chat_template(const std::string& tmpl, const nlohmann::ordered_json& context);
std::string render_chat_template(const std::string& tmpl, const nlohmann::json& context);

// The variables apply_chat_template passes: messages, tools = none, documents = none,
// add_generation_prompt, and the special tokens (bos_token, eos_token, unk_token, pad_token) from
// tokenizer_config.json values (plain strings or {"content": ...} objects).
nlohmann::ordered_json chat_template_context(const nlohmann::ordered_json& messages,
                                             const nlohmann::ordered_json& tokenizer_config,
                                             bool add_generation_prompt = false);

// A tokenizer folder's template: chat_template.jinja if present (as transformers v5 prefers), else the
// "chat_template" string of tokenizer_config.json (or its entry named "default"). Throws Error when
// neither exists.
std::string load_chat_template(const std::string& tokenizer_dir);
// The same choice from contents already read: `jinja_file` (nullopt when there is no
// chat_template.jinja) and tokenizer_config.json (null when absent). `where` names the source in errors.
std::string select_chat_template(const std::optional<std::string>& jinja_file, const nlohmann::json& tokenizer_config,
                                 const std::string& where);

}  // namespace ernie
