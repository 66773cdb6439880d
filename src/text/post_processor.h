// tokenizer.json "post_processor": TemplateProcessing (single-sequence template), ByteLevel (ids unchanged)
// and Sequence. Adds the template's special tokens around the encoded ids.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ernie::text {

class PostProcessor {
 public:
  PostProcessor() = default;  // none: ids unchanged
  static PostProcessor from_json(const nlohmann::json& j, const std::string& where);

  // How many ids apply() adds to a single sequence (what truncation reserves room for).
  size_t added_tokens() const;
  // The final ids for one sequence; with add_special_tokens false the ids are returned unchanged.
  std::vector<int64_t> apply(std::vector<int64_t> ids, bool add_special_tokens) const;

 private:
  // One template: a list of pieces, each either the sequence itself or a run of special-token ids.
  struct Piece {
    bool sequence = false;
    std::vector<int64_t> ids;
  };
  void add(const nlohmann::json& j, const std::string& where);
  std::vector<std::vector<Piece>> templates_;  // applied in order (Sequence of TemplateProcessing)
};

}  // namespace ernie::text
