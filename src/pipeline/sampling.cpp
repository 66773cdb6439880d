#include "pipeline/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace ernie {

static constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int64_t argmax(const float* logits, int64_t n) {
  ERNIE_CHECK(n > 0, "argmax over an empty row");
  int64_t best = 0;
  for (int64_t i = 0; i < n; ++i) {
    ERNIE_CHECK(!std::isnan(logits[i]), "the model produced NaN logits (token ", std::to_string(i), ")");
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

void apply_temperature(std::vector<float>& scores, float temperature) {
  ERNIE_CHECK(temperature > 0, "temperature must be > 0 to sample, got ", std::to_string(temperature));
  if (temperature == 1.0f) return;
  for (float& s : scores) s /= temperature;
}

void apply_top_k(std::vector<float>& scores, int top_k) {
  if (top_k <= 0 || size_t(top_k) >= scores.size()) return;
  std::vector<float> sorted = scores;
  std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(), std::greater<float>());
  float kth = sorted[size_t(top_k - 1)];
  for (float& s : scores)
    if (s < kth) s = kNegInf;
}

void apply_top_p(std::vector<float>& scores, float top_p) {
  if (top_p >= 1.0f) return;
  const size_t n = scores.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  float mx = scores[order[n - 1]];
  if (!std::isfinite(mx)) return;
  std::vector<double> p(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += (p[i] = std::exp(double(scores[order[i]]) - double(mx)));
  double cum = 0;
  for (size_t i = 0; i + 1 < n; ++i) {  // the last (most likely) token is always kept
    cum += p[i] / sum;
    if (cum <= 1.0 - double(top_p)) scores[order[i]] = kNegInf;
  }
}

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {
  ERNIE_CHECK(std::isfinite(p.temperature) && std::isfinite(p.top_p), "sampling parameters must be finite");
  ERNIE_CHECK(p.top_p > 0 && p.top_p <= 1, "top_p must be in (0, 1], got ", std::to_string(p.top_p));
  ERNIE_CHECK(p.top_k >= 0, "top_k must be >= 0, got ", std::to_string(p.top_k));
}

std::vector<float> Sampler::probabilities(const float* logits, int64_t n) const {
  ERNIE_CHECK(n > 0, "sampling from an empty row");
  std::vector<float> s(logits, logits + n);
  for (int64_t i = 0; i < n; ++i)
    ERNIE_CHECK(!std::isnan(s[size_t(i)]), "the model produced NaN logits (token ", std::to_string(i), ")");
  apply_temperature(s, p_.temperature);
  apply_top_k(s, p_.top_k);
  apply_top_p(s, p_.top_p);
  float mx = *std::max_element(s.begin(), s.end());
  ERNIE_CHECK(std::isfinite(mx), "no token left to sample (all logits are -inf)");
  double sum = 0;
  std::vector<double> e(s.size());
  for (size_t i = 0; i < s.size(); ++i) sum += (e[i] = std::exp(double(s[i]) - double(mx)));
  std::vector<float> probs(s.size());
  for (size_t i = 0; i < s.size(); ++i) probs[i] = float(e[i] / sum);
  return probs;
}

int64_t Sampler::next(const float* logits, int64_t n) {
  if (!p_.do_sample()) return argmax(logits, n);
  std::vector<float> probs = probabilities(logits, n);
  double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  double cum = 0;
  int64_t last_nonzero = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (probs[size_t(i)] <= 0) continue;
    last_nonzero = i;
    cum += probs[size_t(i)];
    if (u < cum) return i;
  }
  return last_nonzero;  // rounding left u just above the total
}

}  // namespace ernie
