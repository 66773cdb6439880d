// Golden data from the diffusers reference (tests/data/tiny-ernie-image) and the one comparison helper
// every test uses: relative L2 error and cosine similarity per tensor; small shared test helpers.
#pragma once
#include <algorithm>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/error.h"
#include "core/tensor.h"
#include "io/model_folder.h"
#include "io/safetensors.h"

namespace ernie::test {

inline std::string data_dir() { return ERNIE_TEST_DATA; }
inline std::string tiny_model() { return data_dir() + "/tiny-ernie-image/model"; }
inline std::string golden_json() { return data_dir() + "/tiny-ernie-image/golden.json"; }

inline const SafeTensorsFile& golden() {
  static std::shared_ptr<SafeTensorsFile> g =
      SafeTensorsFile::open(data_dir() + "/tiny-ernie-image/golden.safetensors");
  return *g;
}
inline Tensor golden_tensor(const std::string& name) { return golden().tensor(name); }

// Uniform in [-scale, scale] (offset shifts the mean), F32 on the host, the same values for the same seed.
inline Tensor rnd(const Shape& s, uint32_t seed, float scale = 1.f, float offset = 0.f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(size_t(shape_numel(s)));
  for (float& x : v) x = d(g) + offset;
  return Tensor::from_vector(v, s);
}
inline std::vector<int64_t> golden_ids(const std::string& name) {
  Tensor t = golden_tensor(name);
  const int64_t* p = t.data<int64_t>();
  return std::vector<int64_t>(p, p + t.numel());
}

// The tiny DiT forward's golden inputs; ErnieDit::forward(x, t, text, text_lens) is golden "dit.out".
// `const auto [x, text, t, lens] = test::dit_inputs();`
struct DitInputs {
  Tensor x, text;
  std::vector<float> t;
  std::vector<int64_t> text_lens;
};
inline DitInputs dit_inputs() {
  return {golden_tensor("dit.x").to_f32(), golden_tensor("dit.text").to_f32(), golden_tensor("dit.t").to_vector(),
          golden_ids("dit.text_lens")};
}

struct Closeness {
  double rel_l2 = 0, cosine = 1, max_abs = 0;
};

inline Closeness closeness(const std::vector<float>& a, const std::vector<float>& b) {
  Closeness c;
  double num = 0, den = 0, dot = 0, na = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * b[i];
    dot += double(a[i]) * b[i];
    na += double(a[i]) * a[i];
    c.max_abs = std::max(c.max_abs, std::fabs(d));
  }
  c.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  c.cosine = (na > 0 && den > 0) ? dot / std::sqrt(na * den) : (num == 0 ? 1.0 : 0.0);
  return c;
}

// Asserts shape equality, relative L2 <= rel_l2 and cosine >= min_cosine; NaN never passes.
inline ::testing::AssertionResult tensors_close(const Tensor& actual, const Tensor& expected, double rel_l2,
                                                double min_cosine = -1) {
  if (actual.shape() != expected.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(actual.shape()) << " != expected "
                                         << shape_str(expected.shape());
  auto a = actual.to_vector(), b = expected.to_vector();
  for (float x : a)
    if (!std::isfinite(x)) return ::testing::AssertionFailure() << "non-finite value in result";
  Closeness c = closeness(a, b);
  if (!(c.rel_l2 <= rel_l2) || !(c.cosine >= min_cosine))
    return ::testing::AssertionFailure() << "rel_l2 " << c.rel_l2 << " (limit " << rel_l2 << "), cosine " << c.cosine
                                         << " (min " << min_cosine << "), max_abs " << c.max_abs;
  return ::testing::AssertionSuccess() << "rel_l2 " << c.rel_l2 << ", cosine " << c.cosine;
}

// How far `a` is from `b`: PSNR for signals of peak-to-peak `range` (0: b's own range) and the largest
// |a - b| (images in [-1, 1] have range 2).
struct PsnrDiff {
  double psnr = 0, max_abs = 0;
};
inline PsnrDiff psnr_diff(const Tensor& a, const Tensor& b, double range = 0) {
  const std::vector<float> x = a.to_vector(), y = b.to_vector();
  double mse = 0, mx = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    const double d = double(x[i]) - double(y[i]);
    mse += d * d;
    mx = std::max(mx, std::fabs(d));
  }
  if (range <= 0 && !y.empty()) {
    const auto [lo, hi] = std::minmax_element(y.begin(), y.end());
    range = std::max(1e-12, double(*hi - *lo));
  }
  mse /= double(std::max<size_t>(1, x.size()));
  return {mse == 0 ? 999.0 : 10 * std::log10(range * range / mse), mx};
}

// CPU fp32 tolerance from DESIGN.md.
constexpr double kCpuRelL2 = 1e-4;

// The fatal problems ModelFolder::check() finds, one "component: message" line each ("" when none).
inline std::string fatal_problems(const ModelFolder& m) {
  std::string s;
  for (const Problem& p : m.check())
    if (p.fatal) s += p.component + ": " + p.message + "\n";
  return s;
}

// The message of the ernie::Error that `f` throws, or "" when it throws none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Expects `f` to throw an ernie::Error whose message contains `needle`.
template <class F>
void expect_error(F&& f, const std::string& needle) {
  const std::string msg = error_of(f);
  EXPECT_FALSE(msg.empty()) << "no error thrown (expected one mentioning '" << needle << "')";
  EXPECT_NE(msg.find(needle), std::string::npos) << msg;
}

// A scratch folder removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("ernie-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

}  // namespace ernie::test
