// The prompt enhancer (pe/ + pe_tokenizer/): a Ministral3 causal LM that rewrites a short prompt into the
// rich description the DiT was trained on. Follows diffusers' ErnieImagePipeline._enhance_prompt_with_pe:
// render the chat template over [system?, user = json.dumps({"prompt", "width", "height"})], tokenize it
// (add_special_tokens, no truncation), generate with a KV cache (prefill, then one token per step) until
// EOS or max_new_tokens, decode only the new ids with skip_special_tokens and strip whitespace.
#pragma once
#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "io/model_folder.h"
#include "models/mistral.h"
#include "models/token_sampling.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace ernie {

struct Generation {
  std::vector<int64_t> ids;  // new tokens; ends with EOS when it stopped on it
  bool stopped_on_eos = false;
  double prefill_s = 0, decode_s = 0;  // wall time of the prefill and of all decode steps
};

struct GenerateOptions {
  int max_new_tokens = 0;  // > 0
  int64_t eos_id = -1;     // -1: never stop early
  // Called after each new token (count so far); may throw Cancelled to stop.
  std::function<void(int)> on_token;
  const std::atomic<bool>* cancel = nullptr;  // polled before each step; throws Cancelled when set
};

// KV-cached autoregressive generation with any loaded causal LM (all layers, LM head): one prefill over
// `prompt_ids`, then one forward per new token. The cache grows as needed.
Generation generate_tokens(const MistralModel& lm, const std::vector<int64_t>& prompt_ids, Sampler& sampler,
                           const GenerateOptions& opt);

struct EnhanceOptions {
  std::optional<SamplingParams> sampling;  // nullopt: default_sampling() (the reference's settings)
  int max_new_tokens = 0;                  // 0: default_max_new_tokens() (the reference's choice)
  std::optional<std::string> system_prompt;
  std::function<void(int generated, int max_new_tokens)> on_token;
  const std::atomic<bool>* cancel = nullptr;
};

struct EnhanceResult {
  std::string text;      // the revised prompt
  std::string rendered;  // the chat template's output
  std::vector<int64_t> prompt_ids;
  Generation generation;
};

class PromptEnhancer {
 public:
  // Needs the folder opened with its PE (ModelFolder::open(dir, true)); throws Error naming what is
  // missing (pe/, pe_tokenizer/, a tensor) otherwise.
  static PromptEnhancer load(const ModelFolder& m, Device device, DType act);

  std::string render(const std::string& prompt, int width, int height,
                     const std::optional<std::string>& system_prompt = std::nullopt) const;
  std::vector<int64_t> tokenize(const std::string& rendered) const;  // add_special_tokens, no truncation
  EnhanceResult enhance(const std::string& prompt, int width, int height, const EnhanceOptions& opt = {}) const;

  // temperature 0.6 and top_p 0.95 (the reference passes them), top_k from pe/generation_config.json
  // or transformers' default 50 when it sets none.
  const SamplingParams& default_sampling() const { return defaults_; }
  // pe_tokenizer's model_max_length (what the reference passes as max_new_tokens); 2048 when unset.
  int default_max_new_tokens() const { return max_new_tokens_; }
  const Tokenizer& tokenizer() const { return tok_; }
  const MistralModel& model() const { return lm_; }

 private:
  MistralModel lm_;
  Tokenizer tok_;
  std::shared_ptr<ChatTemplate> template_;
  nlohmann::ordered_json tokenizer_config_;
  SamplingParams defaults_;
  int max_new_tokens_ = 2048;
};

}  // namespace ernie
