#include "text/pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "text/unicode.h"

namespace ernie::text {
namespace {
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

bool get_bool(const nlohmann::json& j, const char* key, bool def, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return def;
  ERNIE_CHECK(j[key].is_boolean(), where, ": pre_tokenizer field \"", key, "\" must be true or false");
  return j[key].get<bool>();
}
}  // namespace

PreTokenizer PreTokenizer::from_json(const nlohmann::json& j, const std::string& where) {
  PreTokenizer p;
  if (!j.is_null()) p.add(j, where);
  return p;
}

void PreTokenizer::add(const nlohmann::json& j, const std::string& where) {
  ERNIE_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), where,
              ": pre_tokenizer must be an object with a string \"type\"");
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    ERNIE_CHECK(j.contains("pretokenizers") && j["pretokenizers"].is_array(), where,
                ": pre_tokenizer Sequence needs a \"pretokenizers\" array");
    for (const auto& s : j["pretokenizers"]) add(s, where);
  } else if (type == "Split") {
    Step st{Step::Kind::Split, nullptr};
    ERNIE_CHECK(j.contains("pattern") && j["pattern"].is_object(), where,
                ": pre_tokenizer Split needs a \"pattern\" object ({\"Regex\": ...} or {\"String\": ...})");
    const auto& pat = j["pattern"];
    const std::string what = where + ": pre_tokenizer Split pattern";
    if (pat.contains("Regex") && pat["Regex"].is_string())
      st.regex = std::make_shared<Regex>(pat["Regex"].get<std::string>(), what);
    else if (pat.contains("String") && pat["String"].is_string())
      st.regex = std::make_shared<Regex>(regex_escape(pat["String"].get<std::string>()), what);
    else
      fail(where, ": pre_tokenizer Split pattern must be {\"Regex\": \"...\"} or {\"String\": \"...\"}");
    ERNIE_CHECK(j.contains("behavior") && j["behavior"].is_string(), where,
                ": pre_tokenizer Split needs a string \"behavior\"");
    const std::string b = j["behavior"].get<std::string>();
    if (b == "Removed") st.behavior = Behavior::Removed;
    else if (b == "Isolated") st.behavior = Behavior::Isolated;
    else if (b == "MergedWithPrevious") st.behavior = Behavior::MergedWithPrevious;
    else if (b == "MergedWithNext") st.behavior = Behavior::MergedWithNext;
    else if (b == "Contiguous") st.behavior = Behavior::Contiguous;
    else
      fail(where, ": pre_tokenizer Split behavior \"", b,
           "\" is unknown (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous)");
    st.invert = get_bool(j, "invert", false, where);
    steps_.push_back(std::move(st));
  } else if (type == "ByteLevel") {
    Step st{Step::Kind::ByteLevel, nullptr};
    st.add_prefix_space = get_bool(j, "add_prefix_space", true, where);
    if (get_bool(j, "use_regex", true, where))
      st.regex = std::make_shared<Regex>(kGpt2Pattern, where + ": ByteLevel regex");
    steps_.push_back(std::move(st));
  } else {
    fail(where, ": pre_tokenizer type \"", type, "\" is not supported (supported: Split, ByteLevel, Sequence)");
  }
}

bool PreTokenizer::byte_level() const {
  for (const auto& s : steps_)
    if (s.kind == Step::Kind::ByteLevel) return true;
  return false;
}

// Splits `text` by the step's regex with its behavior, as tokenizers' NormalizedString::split.
void PreTokenizer::split(const Step& st, std::string_view text, std::vector<std::string>& out) {
  struct Part {
    size_t b, e;
    bool match;
  };
  std::vector<Part> parts;
  size_t prev = 0;
  for (auto [b, e] : st.regex->find_all(text)) {
    if (prev != b) parts.push_back({prev, b, false});
    parts.push_back({b, e, true});
    prev = e;
  }
  if (prev != text.size()) parts.push_back({prev, text.size(), false});
  if (st.invert)
    for (auto& p : parts) p.match = !p.match;

  struct Keep {
    size_t b, e;
    bool remove;
  };
  std::vector<Keep> keep;
  switch (st.behavior) {
    case Behavior::Isolated:
      for (auto& p : parts) keep.push_back({p.b, p.e, false});
      break;
    case Behavior::Removed:
      for (auto& p : parts) keep.push_back({p.b, p.e, p.match});
      break;
    case Behavior::Contiguous: {
      bool previous = false;
      for (auto& p : parts) {
        if (p.match == previous && !keep.empty()) keep.back().e = p.e;
        else keep.push_back({p.b, p.e, false});
        previous = p.match;
      }
      break;
    }
    case Behavior::MergedWithPrevious: {
      bool previous = false;
      for (auto& p : parts) {
        if (p.match && !previous && !keep.empty()) keep.back().e = p.e;
        else keep.push_back({p.b, p.e, false});
        previous = p.match;
      }
      break;
    }
    case Behavior::MergedWithNext: {
      bool previous = false;
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->match && !previous && !keep.empty()) keep.back().b = it->b;
        else keep.push_back({it->b, it->e, false});
        previous = it->match;
      }
      std::reverse(keep.begin(), keep.end());
      break;
    }
  }
  for (auto& k : keep)
    if (!k.remove && k.e > k.b) out.emplace_back(text.substr(k.b, k.e - k.b));
}

std::string PreTokenizer::byte_level_map(std::string_view text) {
  std::string s;
  s.reserve(text.size() * 2);
  for (unsigned char c : text) append_utf8(s, byte_to_code_point(c));
  return s;
}

void PreTokenizer::run(std::string_view text, std::vector<std::string>& pieces) const {
  if (text.empty()) return;
  std::vector<std::string> cur{std::string(text)}, next;
  for (const Step& st : steps_) {
    next.clear();
    for (std::string& piece : cur) {
      if (st.kind == Step::Kind::Split) {
        split(st, piece, next);
        continue;
      }
      // ByteLevel: optional prefix space, optional GPT-2 split, then bytes -> visible characters.
      std::string p = std::move(piece);
      if (st.add_prefix_space && p[0] != ' ') p.insert(p.begin(), ' ');
      if (st.regex) {
        size_t first = next.size();
        Step iso{Step::Kind::Split, st.regex};
        split(iso, p, next);
        for (size_t i = first; i < next.size(); ++i) next[i] = byte_level_map(next[i]);
      } else {
        next.push_back(byte_level_map(p));
      }
    }
    std::swap(cur, next);
  }
  for (auto& p : cur)
    if (!p.empty()) pieces.push_back(std::move(p));
}

}  // namespace ernie::text
