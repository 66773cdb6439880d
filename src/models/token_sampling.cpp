#include "models/token_sampling.h"

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

// The warpers' result without touching the whole vocabulary more than a few linear passes: top-k picks
// its survivors with nth_element, and top-p sorts only those (at most k + ties) instead of all 131k.
// Equivalent to apply_temperature -> apply_top_k -> apply_top_p -> softmax (tested), same tie order.
Sampler::Candidates Sampler::candidates(const float* logits, int64_t n) const {
  ERNIE_CHECK(n > 0, "sampling from an empty row");
  ERNIE_CHECK(p_.temperature > 0, "temperature must be > 0 to sample, got ", std::to_string(p_.temperature));
  // Scaled scores as TemperatureLogitsWarper computes them (a float division; none at temperature 1).
  const float t = p_.temperature;
  std::vector<float> s(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    ERNIE_CHECK(!std::isnan(logits[i]), "the model produced NaN logits (token ", std::to_string(i), ")");
    s[size_t(i)] = t == 1.0f ? logits[i] : logits[i] / t;
  }
  Candidates c;
  float kth = kNegInf;
  if (p_.top_k > 0 && p_.top_k < n) {  // the k-th largest score, with a size-k min-heap
    std::vector<float> heap;
    heap.reserve(size_t(p_.top_k));
    for (float v : s) {
      if (heap.size() < size_t(p_.top_k)) {
        heap.push_back(v);
        std::push_heap(heap.begin(), heap.end(), std::greater<float>());
      } else if (v > heap.front()) {
        std::pop_heap(heap.begin(), heap.end(), std::greater<float>());
        heap.back() = v;
        std::push_heap(heap.begin(), heap.end(), std::greater<float>());
      }
    }
    kth = heap.front();
  }
  for (int64_t i = 0; i < n; ++i)
    if (s[size_t(i)] >= kth && s[size_t(i)] != kNegInf) c.ids.push_back(i);
  ERNIE_CHECK(!c.ids.empty(), "no token left to sample (all logits are -inf)");
  if (p_.top_p < 1.0f && c.ids.size() > 1) {
    float smax = kNegInf;
    for (int64_t i : c.ids) smax = std::max(smax, s[size_t(i)]);
    const double mx = smax;
    double sum = 0;
    for (int64_t i : c.ids) sum += std::exp(double(s[size_t(i)]) - mx);
    // Tokens whose probability is below (1 - top_p) / count together hold less than 1 - top_p, so the
    // ascending cumulative sum removes every one of them: only the others need sorting.
    const double floor_p = (1.0 - double(p_.top_p)) / double(c.ids.size());
    std::vector<int64_t> order;
    double cum = 0;
    for (int64_t i : c.ids) {
      const double p = std::exp(double(s[size_t(i)]) - mx) / sum;
      if (p < floor_p && double(s[size_t(i)]) < mx) cum += p;
      else order.push_back(i);
    }
    // ascending ids: stable_sort keeps index order on ties
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return s[size_t(a)] < s[size_t(b)]; });
    std::vector<double> e(order.size());
    for (size_t i = 0; i < order.size(); ++i) e[i] = std::exp(double(s[size_t(order[i])]) - mx);
    std::vector<char> keep(order.size(), 1);
    for (size_t i = 0; i + 1 < order.size(); ++i) {
      cum += e[i] / sum;
      if (cum <= 1.0 - double(p_.top_p)) keep[i] = 0;
    }
    std::vector<int64_t> kept;
    for (size_t i = 0; i < order.size(); ++i)
      if (keep[i]) kept.push_back(order[i]);
    std::sort(kept.begin(), kept.end());
    c.ids = std::move(kept);
  }
  float mx = kNegInf;
  for (int64_t i : c.ids) mx = std::max(mx, s[size_t(i)]);
  double sum = 0;
  c.probs.resize(c.ids.size());
  for (size_t i = 0; i < c.ids.size(); ++i) sum += (c.probs[i] = std::exp(double(s[size_t(c.ids[i])]) - double(mx)));
  for (double& p : c.probs) p /= sum;
  return c;
}

std::vector<float> Sampler::probabilities(const float* logits, int64_t n) const {
  Candidates c = candidates(logits, n);
  std::vector<float> probs(size_t(n), 0.f);
  for (size_t i = 0; i < c.ids.size(); ++i) probs[size_t(c.ids[i])] = float(c.probs[i]);
  return probs;
}

int64_t Sampler::next(const float* logits, int64_t n) {
  if (!p_.do_sample()) return argmax(logits, n);
  Candidates c = candidates(logits, n);
  double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  double cum = 0;
  for (size_t i = 0; i < c.ids.size(); ++i) {
    cum += c.probs[i];
    if (u < cum) return c.ids[i];
  }
  return c.ids.back();  // rounding left u just above the total
}

}  // namespace ernie
