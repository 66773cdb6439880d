// A HuggingFace tokenizer.json tokenizer (byte-level BPE as used by ERNIE-Image's text encoder and prompt
// enhancer), driven by the file: added tokens, normalizer, pre-tokenizer, BPE model, post-processor and
// decoder, plus tokenizer_config.json (model_max_length, bos/eos/pad/unk, clean_up_tokenization_spaces).
// Ids match HuggingFace tokenizers exactly for what it supports; anything else is a load-time Error.
// A loaded Tokenizer is immutable and safe to use from several threads; copies share the loaded data.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ernie {

class Tokenizer {
 public:
  // `dir` holds tokenizer.json and optionally tokenizer_config.json.
  static Tokenizer load(const std::string& dir);
  // From the files' contents; `config_json` may be empty. `where` names the source in error messages.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view config_json = {},
                             const std::string& where = "tokenizer.json");

  // Ids of `text` (valid UTF-8, else Error). With add_special_tokens the post-processor's tokens are added
  // (e.g. BOS). With truncation the result is cut on the right to model_max_length, special tokens counted,
  // as `tokenizer(text, truncation=True)`.
  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens = true, bool truncation = true) const;
  // Text of `ids`; ids no token has are skipped, as in tokenizers; negative ids are an Error.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const;

  // Ids of the tokens tokenizer_config.json names; -1 when it names none.
  int64_t bos_id() const;
  int64_t eos_id() const;
  int64_t pad_id() const;
  int64_t unk_id() const;

  std::optional<int64_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int64_t id) const;  // Error when no token has this id
  bool is_special(int64_t id) const;          // an added token marked special
  size_t vocab_size() const;                  // model vocabulary plus added tokens outside it
  size_t model_max_length() const;            // 0 when there is no limit

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace ernie
