#include "text/post_processor.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace ernie::text {
namespace {

// The ids of special token `name` from the template's "special_tokens" map.
std::vector<int64_t> special_ids(const nlohmann::json& specials, const std::string& name, const std::string& where) {
  ERNIE_CHECK(specials.is_object() && specials.contains(name), where, ": post_processor template names special token \"",
              name, "\", which is missing from its \"special_tokens\"");
  const auto& s = specials[name];
  ERNIE_CHECK(s.is_object() && s.contains("ids") && s["ids"].is_array(), where, ": post_processor special token \"",
              name, "\" needs an \"ids\" array");
  std::vector<int64_t> ids;
  for (const auto& v : s["ids"]) {
    ERNIE_CHECK(v.is_number_unsigned(), where, ": post_processor special token \"", name,
                "\" has an id that is not a non-negative integer");
    ids.push_back(v.get<int64_t>());
  }
  return ids;
}

}  // namespace

PostProcessor PostProcessor::from_json(const nlohmann::json& j, const std::string& where) {
  PostProcessor p;
  if (!j.is_null()) p.add(j, where);
  return p;
}

void PostProcessor::add(const nlohmann::json& j, const std::string& where) {
  ERNIE_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), where,
              ": post_processor must be an object with a string \"type\"");
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    ERNIE_CHECK(j.contains("processors") && j["processors"].is_array(), where,
                ": post_processor Sequence needs a \"processors\" array");
    for (const auto& s : j["processors"]) add(s, where);
  } else if (type == "ByteLevel") {
    // Only trims offsets, which this tokenizer does not report.
  } else if (type == "TemplateProcessing") {
    ERNIE_CHECK(j.contains("single"), where, ": post_processor TemplateProcessing needs \"single\"");
    const nlohmann::json specials = j.contains("special_tokens") ? j["special_tokens"] : nlohmann::json::object();
    std::vector<Piece> pieces;
    auto add_name = [&](const std::string& name) {
      if (name == "A" || name == "$A" || name == "$") {
        pieces.push_back({true, {}});
      } else if (name == "B" || name == "$B") {
        fail(where, ": post_processor TemplateProcessing \"single\" uses the second sequence $B");
      } else {
        pieces.push_back({false, special_ids(specials, name, where)});
      }
    };
    const auto& single = j["single"];
    if (single.is_string()) {  // "<s> $A" shorthand; a ":N" suffix gives a type id, which does not matter here
      std::string s = single.get<std::string>();
      size_t i = 0;
      while (i < s.size()) {
        size_t k = s.find(' ', i);
        if (k == std::string::npos) k = s.size();
        std::string w = s.substr(i, k - i);
        if (!w.empty()) {
          size_t colon = w.rfind(':');
          if (colon != std::string::npos && colon > 0) w = w.substr(0, colon);
          add_name(w);
        }
        i = k + 1;
      }
    } else {
      ERNIE_CHECK(single.is_array(), where, ": post_processor TemplateProcessing \"single\" must be a list");
      for (const auto& p : single) {
        if (p.is_object() && p.contains("Sequence") && p["Sequence"].is_object()) {
          const auto& seq = p["Sequence"];
          ERNIE_CHECK(seq.contains("id") && seq["id"].is_string(), where, ": post_processor Sequence piece needs an id");
          add_name(seq["id"].get<std::string>() == "A" ? "A" : "B");
        } else if (p.is_object() && p.contains("SpecialToken") && p["SpecialToken"].is_object()) {
          const auto& sp = p["SpecialToken"];
          ERNIE_CHECK(sp.contains("id") && sp["id"].is_string(), where,
                      ": post_processor SpecialToken piece needs a string id");
          pieces.push_back({false, special_ids(specials, sp["id"].get<std::string>(), where)});
        } else {
          fail(where, ": post_processor TemplateProcessing piece must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
        }
      }
    }
    templates_.push_back(std::move(pieces));
  } else {
    fail(where, ": post_processor type \"", type,
         "\" is not supported (supported: TemplateProcessing, ByteLevel, Sequence)");
  }
}

size_t PostProcessor::added_tokens() const {
  size_t n = 0;
  for (const auto& t : templates_)
    for (const auto& p : t)
      if (!p.sequence) n += p.ids.size();
  return n;
}

std::vector<int64_t> PostProcessor::apply(std::vector<int64_t> ids, bool add_special_tokens) const {
  if (!add_special_tokens) return ids;
  for (const auto& t : templates_) {
    std::vector<int64_t> out;
    out.reserve(ids.size() + 8);
    for (const auto& p : t) {
      if (p.sequence) out.insert(out.end(), ids.begin(), ids.end());
      else out.insert(out.end(), p.ids.begin(), p.ids.end());
    }
    ids = std::move(out);
  }
  return ids;
}

}  // namespace ernie::text
