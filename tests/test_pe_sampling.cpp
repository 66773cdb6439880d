// Sampling for the prompt enhancer (src/pipeline/sampling.h): greedy is argmax, the top-k and top-p
// masks on hand-made distributions, temperature, seeds.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <limits>
#include <random>

#include "core/error.h"
#include "models/token_sampling.h"

namespace ernie {
namespace {

const float kInf = std::numeric_limits<float>::infinity();

std::vector<float> log_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(float(std::log(p)));
  return l;
}

TEST(Sampling, ArgmaxTakesFirstMaximumAndRejectsNaN) {
  std::vector<float> x = {0.f, 3.f, -1.f, 3.f, 2.f};
  EXPECT_EQ(argmax(x.data(), 5), 1);
  std::vector<float> neg = {-5.f, -2.f, -kInf};
  EXPECT_EQ(argmax(neg.data(), 3), 1);
  std::vector<float> bad = {0.f, std::nanf("")};
  EXPECT_THROW(argmax(bad.data(), 2), Error);
}

TEST(Sampling, GreedyWhenTemperatureIsZeroOrReferenceSaysNoSampling) {
  std::vector<float> x = {0.5f, 0.1f, 2.0f, 1.9f};
  for (SamplingParams p : {SamplingParams{0.f, 0.95f, 50, 1}, SamplingParams{1.f, 1.f, 50, 2}}) {
    EXPECT_FALSE(p.do_sample());
    Sampler s(p);
    for (int i = 0; i < 20; ++i) EXPECT_EQ(s.next(x.data(), 4), 2);
  }
  EXPECT_TRUE((SamplingParams{1.f, 0.9f, 0, 0}.do_sample()));
  EXPECT_TRUE((SamplingParams{0.6f, 1.f, 0, 0}.do_sample()));
}

TEST(Sampling, TopKKeepsTheKLargestAndTies) {
  std::vector<float> s = {1.f, 5.f, 3.f, 4.f, 2.f};
  apply_top_k(s, 2);
  EXPECT_EQ(s, (std::vector<float>{-kInf, 5.f, -kInf, 4.f, -kInf}));
  std::vector<float> ties = {1.f, 3.f, 3.f, 0.f};
  apply_top_k(ties, 1);  // both 3s equal the 1st largest: kept, as torch.topk + '<'
  EXPECT_EQ(ties, (std::vector<float>{-kInf, 3.f, 3.f, -kInf}));
  std::vector<float> all = {1.f, 2.f};
  apply_top_k(all, 0);
  apply_top_k(all, 5);
  EXPECT_EQ(all, (std::vector<float>{1.f, 2.f}));
}

TEST(Sampling, TopPRemovesTheLowTail) {
  // probs 0.5, 0.25, 0.15, 0.1: ascending cumsum 0.1, 0.25, 0.5, 1.0.
  std::vector<float> s = log_of({0.5, 0.25, 0.15, 0.1});
  apply_top_p(s, 0.8f);  // removes cum <= 0.2: only the 0.1 token
  EXPECT_TRUE(std::isfinite(s[0]) && std::isfinite(s[1]) && std::isfinite(s[2]));
  EXPECT_EQ(s[3], -kInf);
  s = log_of({0.5, 0.25, 0.15, 0.1});
  apply_top_p(s, 0.6f);  // removes cum <= 0.4: the 0.1 and 0.15 tokens
  EXPECT_TRUE(std::isfinite(s[0]) && std::isfinite(s[1]));
  EXPECT_EQ(s[2], -kInf);
  EXPECT_EQ(s[3], -kInf);
  s = log_of({0.5, 0.25, 0.15, 0.1});
  apply_top_p(s, 0.01f);  // the most likely token always survives
  EXPECT_TRUE(std::isfinite(s[0]));
  EXPECT_EQ(s[1], -kInf);
  s = log_of({0.5, 0.25, 0.15, 0.1});
  apply_top_p(s, 1.0f);
  for (float v : s) EXPECT_TRUE(std::isfinite(v));
}

TEST(Sampling, WarpersRunTemperatureThenTopKThenTopP) {
  std::vector<float> logits = log_of({0.4, 0.3, 0.2, 0.1});
  // top-k 2 first leaves {0.4, 0.3} renormalised to {0.571, 0.429}; top-p 0.5 then removes cum <= 0.5,
  // i.e. the 0.429 token. (top-p first would keep both: on the full row it removes only 0.1 and 0.2.)
  std::vector<float> probs = Sampler(SamplingParams{1.0f, 0.5f, 2, 0}).probabilities(logits.data(), 4);
  EXPECT_EQ(probs, (std::vector<float>{1.f, 0.f, 0.f, 0.f}));
  // Temperature 0.5 first gives {0.533, 0.3, 0.133, 0.033}; top-p 0.8 removes cum <= 0.2: two tokens.
  // (top-p before temperature would remove only the 0.1 token.)
  probs = Sampler(SamplingParams{0.5f, 0.8f, 0, 0}).probabilities(logits.data(), 4);
  EXPECT_EQ(probs[2], 0.f);
  EXPECT_EQ(probs[3], 0.f);
  EXPECT_NEAR(probs[0], 0.16 / 0.25, 1e-5);
  EXPECT_NEAR(probs[1], 0.09 / 0.25, 1e-5);
}

TEST(Sampling, FastPathEqualsTheWarpersOnRandomRows) {
  // Sampler works on the top-k survivors only; it must equal temperature -> top-k -> top-p -> softmax
  // applied to the whole row, including ties (rows drawn from few distinct values) and -inf entries.
  std::mt19937 rng(5);
  for (int trial = 0; trial < 60; ++trial) {
    const int n = 50 + int(rng() % 2000);
    std::vector<float> logits(static_cast<size_t>(n));
    const bool ties = trial % 3 == 0;
    for (float& x : logits) x = ties ? float(int(rng() % 7)) : std::normal_distribution<float>(0.f, 3.f)(rng);
    if (trial % 5 == 0) logits[size_t(rng() % size_t(n))] = -kInf;
    SamplingParams p{0.3f + float(trial % 7) * 0.25f, 0.5f + float(trial % 5) * 0.12f, int(trial % 4) * 20, 0};
    std::vector<float> ref = logits;
    apply_temperature(ref, p.temperature);
    apply_top_k(ref, p.top_k);
    apply_top_p(ref, p.top_p);
    float mx = *std::max_element(ref.begin(), ref.end());
    double sum = 0;
    for (float x : ref) sum += std::exp(double(x) - mx);
    std::vector<float> got = Sampler(p).probabilities(logits.data(), n);
    for (int i = 0; i < n; ++i) {
      const double want = std::exp(double(ref[size_t(i)]) - mx) / sum;
      ASSERT_NEAR(got[size_t(i)], want, 1e-6) << "trial " << trial << " token " << i;
      ASSERT_EQ(got[size_t(i)] == 0.f, ref[size_t(i)] == -kInf) << "trial " << trial << " token " << i;
    }
  }
}

TEST(Sampling, SameSeedSameTokensAndFrequenciesFollowTheDistribution) {
  std::vector<float> logits = log_of({0.5, 0.3, 0.2});
  SamplingParams p{1.0f, 0.999f, 0, 42};
  Sampler a(p), b(p);
  std::vector<int64_t> ta, tb;
  for (int i = 0; i < 200; ++i) {
    ta.push_back(a.next(logits.data(), 3));
    tb.push_back(b.next(logits.data(), 3));
  }
  EXPECT_EQ(ta, tb);
  p.seed = 43;
  Sampler c(p);
  std::vector<int64_t> tc;
  for (int i = 0; i < 200; ++i) tc.push_back(c.next(logits.data(), 3));
  EXPECT_NE(ta, tc);
  int counts[3] = {0, 0, 0};
  Sampler d(p);
  const int n = 20000;
  for (int i = 0; i < n; ++i) counts[d.next(logits.data(), 3)]++;
  EXPECT_NEAR(counts[0] / double(n), 0.5, 0.02);
  EXPECT_NEAR(counts[1] / double(n), 0.3, 0.02);
  EXPECT_NEAR(counts[2] / double(n), 0.2, 0.02);
}

TEST(Sampling, MaskedTokensAreNeverDrawn) {
  std::vector<float> logits = {0.f, 0.1f, 0.2f, 5.f, 4.9f};
  Sampler s(SamplingParams{1.0f, 1.0f, 2, 7});  // do_sample() is false at T=1, p=1 -> use T=1.5
  Sampler t(SamplingParams{1.5f, 1.0f, 2, 7});
  for (int i = 0; i < 500; ++i) {
    int64_t k = t.next(logits.data(), 5);
    EXPECT_TRUE(k == 3 || k == 4) << k;
  }
  EXPECT_EQ(s.next(logits.data(), 5), 3);
}

TEST(Sampling, BadParametersAreErrors) {
  EXPECT_THROW(Sampler(SamplingParams{0.6f, 0.f, 0, 0}), Error);
  EXPECT_THROW(Sampler(SamplingParams{0.6f, 1.5f, 0, 0}), Error);
  EXPECT_THROW(Sampler(SamplingParams{0.6f, 0.9f, -1, 0}), Error);
  EXPECT_THROW(Sampler(SamplingParams{std::nanf(""), 0.9f, 0, 0}), Error);
  Sampler s(SamplingParams{0.6f, 0.9f, 0, 0});
  std::vector<float> dead = {-kInf, -kInf};
  EXPECT_THROW(s.next(dead.data(), 2), Error);
}

}  // namespace
}  // namespace ernie
