// tokenizer.json "normalizer": null, NFC, or a Sequence of those. Other normalizers are rejected at load
// with a clear "unsupported" error rather than silently ignored.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ernie::text {

class Normalizer {
 public:
  Normalizer() = default;  // no normalization
  // `j` is the "normalizer" value (may be null); `where` names the file for errors.
  static Normalizer from_json(const nlohmann::json& j, const std::string& where);

  bool empty() const { return steps_.empty(); }
  std::string apply(std::string_view text) const;

 private:
  enum class Step { NFC };
  void add(const nlohmann::json& j, const std::string& where);
  std::vector<Step> steps_;
};

}  // namespace ernie::text
