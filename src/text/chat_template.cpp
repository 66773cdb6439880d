// The public face of the template engine: parse once (jinja_parse.cpp), render (jinja_render.cpp), plus
// the helpers that build apply_chat_template's variables and find a tokenizer folder's template.
#include "text/chat_template.h"

#include <filesystem>
#include <optional>

#include "core/error.h"
#include "core/file.h"
#include "core/json.h"
#include "text/jinja_ast.h"
#include "text/jinja_render.h"

namespace ernie {

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
    if (it->is_string())
      ctx[key] = *it;
    else if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
      ctx[key] = (*it)["content"];
    else
      fail("tokenizer_config.json: '", key, "' must be a string or an object with \"content\"");
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
