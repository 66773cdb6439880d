// Fast reader for tokenizer.json: a SAX pass that streams model.vocab and model.merges straight into flat
// containers (the bulk of a 131k-token file) and builds an ordinary JSON tree for everything else.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/token_table.h"

namespace ernie::text {

struct TokenizerJson {
  nlohmann::json doc;  // the whole file except model.vocab and model.merges
  TokenTable vocab;
  std::vector<std::pair<std::string, std::string>> merges;  // both "a b" and ["a", "b"] forms
  bool has_vocab = false, has_merges = false;
};

// Parses the text of a tokenizer.json; `where` names the file for errors.
TokenizerJson parse_tokenizer_json(std::string_view text, const std::string& where);

}  // namespace ernie::text
