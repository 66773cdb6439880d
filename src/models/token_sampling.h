// Next-token choice for the prompt enhancer, as transformers' generate() does it: greedy (argmax), or
// sampling with the logits warpers in transformers' order — temperature, then top-k, then top-p — and
// a multinomial draw from the softmax of what is left. The draw uses a seeded std::mt19937_64, so the
// same seed gives the same tokens (not the same tokens as torch, whose RNG differs).
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace ernie {

struct SamplingParams {
  float temperature = 0.6f;  // the reference's value; <= 0 means greedy
  float top_p = 0.95f;       // the reference's value; 1 = off
  int top_k = 50;            // 0 = off; transformers' default when generation_config.json sets none
  uint64_t seed = 0;
  // The reference samples when temperature != 1 or top_p != 1 (do_sample); temperature <= 0 is greedy.
  bool do_sample() const { return temperature > 0 && (temperature != 1.0f || top_p != 1.0f); }
};

// Index of the largest logit (the first one on ties, as torch.argmax). Throws Error on NaN.
int64_t argmax(const float* logits, int64_t n);

// The warpers, in place; removed entries become -inf (as transformers' filter_value).
void apply_temperature(std::vector<float>& scores, float temperature);
// Keeps every score >= the k-th largest (ties at the boundary survive, as torch.topk + '<' does).
void apply_top_k(std::vector<float>& scores, int top_k);
// Sorts ascending, removes the tokens whose cumulative probability is <= 1 - top_p, always keeps the most
// likely one (TopPLogitsWarper with min_tokens_to_keep = 1).
void apply_top_p(std::vector<float>& scores, float top_p);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  const SamplingParams& params() const { return p_; }
  // Chooses the next token from one row of logits [n].
  int64_t next(const float* logits, int64_t n);
  // The probabilities the draw would use (after the warpers), for tests.
  std::vector<float> probabilities(const float* logits, int64_t n) const;

 private:
  struct Candidates {
    std::vector<int64_t> ids;   // surviving tokens, ascending
    std::vector<double> probs;  // their probabilities, summing to 1
  };
  Candidates candidates(const float* logits, int64_t n) const;

  SamplingParams p_;
  std::mt19937_64 rng_;
};

}  // namespace ernie
