// The tokenizer a llama.cpp GGUF carries in tokenizer.ggml.* (model "gpt2" with pre "tekken": Mistral's Tekken
// byte-level BPE, as in Ministral-3 / ERNIE-Image's text encoder), rebuilt as the tokenizer.json and
// tokenizer_config.json transformers would have and handed to Tokenizer::from_json.
#pragma once
#include <map>
#include <string>
#include <utility>

#include <nlohmann/json_fwd.hpp>

#include "io/gguf.h"
#include "text/tokenizer.h"

namespace ernie {

// tokenizer_config.json's model_max_length of ERNIE-Image's tokenizer, which a GGUF does not carry.
inline constexpr size_t kGgufTokenizerMaxLength = 2048;

// {tokenizer.json, tokenizer_config.json} from the metadata: tokenizer.ggml.tokens (the vocabulary, ids in
// order), .merges ("a b"), .token_type (2 unknown and 3 control become special added tokens, 4 user-defined
// non-special ones), .bos/eos/unknown/padding_token_id, .add_bos_token (default true for tekken),
// .add_eos_token (default false). The pre-tokenizer is the Tekken split regex then ByteLevel without its own
// regex, the decoder ByteLevel, the post-processor a TemplateProcessing adding BOS/EOS. An unknown
// tokenizer.ggml.model or .pre, a missing key, a duplicate token, a bad merge or an id out of range is an Error
// naming `where` and the key. `model_max_length` 0 means no limit.
std::pair<nlohmann::json, nlohmann::json> gguf_tokenizer_json(const std::map<std::string, GgufValue>& metadata,
                                                              const std::string& where,
                                                              size_t model_max_length = kGgufTokenizerMaxLength);

// The Tokenizer of those files (its errors name `where`).
Tokenizer tokenizer_from_gguf_metadata(const std::map<std::string, GgufValue>& metadata, const std::string& where,
                                       size_t model_max_length = kGgufTokenizerMaxLength);
Tokenizer tokenizer_from_gguf(const GgufFile& f, size_t model_max_length = kGgufTokenizerMaxLength);

}  // namespace ernie
