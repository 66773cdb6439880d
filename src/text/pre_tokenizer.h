// tokenizer.json "pre_tokenizer": Split (regex or literal; Isolated, Removed, MergedWithPrevious,
// MergedWithNext, Contiguous; invert), ByteLevel (add_prefix_space, with or without the GPT-2 regex) and
// Sequence. Turns a text segment into the pieces the model tokenizes.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "text/regex.h"

namespace ernie::text {

class PreTokenizer {
 public:
  PreTokenizer() = default;  // no pre-tokenizer: the segment is one piece
  static PreTokenizer from_json(const nlohmann::json& j, const std::string& where);

  // Appends the pieces of `text` (never empty ones) to `pieces`.
  void run(std::string_view text, std::vector<std::string>& pieces) const;
  // Whether pieces are in the ByteLevel alphabet (the decoder needs not know, but tests do).
  bool byte_level() const;

 private:
  enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
  struct Step {
    enum class Kind { Split, ByteLevel } kind;
    std::shared_ptr<const Regex> regex;  // Split, or ByteLevel with use_regex
    Behavior behavior = Behavior::Isolated;
    bool invert = false;
    bool add_prefix_space = false;  // ByteLevel
  };
  void add(const nlohmann::json& j, const std::string& where);
  static void split(const Step& st, std::string_view text, std::vector<std::string>& out);
  static std::string byte_level_map(std::string_view text);
  std::vector<Step> steps_;
};

}  // namespace ernie::text
