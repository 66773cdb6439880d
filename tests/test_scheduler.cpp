// FlowMatchEulerScheduler: the static-shift schedule against the reference's golden sigmas/timesteps, the
// dynamic (exponential, linear) time shift and the terminal stretch against the formulas evaluated here in
// double, the bf16 timestep the DiT is fed, the Euler step, and clear errors for bad settings.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json.h"
#include "golden.h"
#include "io/configs.h"
#include "io/model_folder.h"
#include "ops/ops.h"
#include "engine/scheduler.h"

using namespace ernie;

namespace {

SchedulerConfig tiny_config() {
  return parse_scheduler_config(read_json_file(test::tiny_model() + "/scheduler/scheduler_config.json"),
                                "scheduler_config.json");
}

void expect_rel(const std::vector<float>& got, const std::vector<double>& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_LE(std::fabs(double(got[i]) - want[i]), tol * std::fabs(want[i]) + 1e-12)
        << what << "[" << i << "]: " << got[i] << " vs " << want[i];
}

std::vector<double> golden_values(const std::string& name) {
  std::vector<float> v = test::golden_tensor(name).to_vector();
  return {v.begin(), v.end()};
}

// The unshifted input the ERNIE pipeline passes: 1 - i/N for i = 0..N-1.
double sigma_hat(int i, int n) { return 1.0 - double(i) / n; }

}  // namespace

TEST(Scheduler, StaticShiftMatchesGolden) {
  const SchedulerConfig cfg = tiny_config();
  ASSERT_FALSE(cfg.use_dynamic_shifting);
  ASSERT_EQ(cfg.shift, 4.0f);
  FlowMatchEulerScheduler s(cfg);
  for (int n : {1, 4, 8, 50}) {
    s.set_timesteps(n);
    const std::string p = "sched." + std::to_string(n) + ".";
    ASSERT_EQ(s.num_steps(), n);
    expect_rel(s.sigmas(), golden_values(p + "sigmas"), 1e-6, (p + "sigmas").c_str());
    expect_rel(s.timesteps(), golden_values(p + "timesteps"), 1e-6, (p + "timesteps").c_str());
    EXPECT_EQ(s.sigmas().back(), 0.0f);
    // The golden run was fp32, so the DiT was fed the fp32 timesteps unchanged.
    std::vector<float> fed;
    for (float t : s.timesteps()) fed.push_back(dit_timestep(t, DType::F32));
    expect_rel(fed, golden_values(p + "timesteps"), 1e-6, (p + "fed").c_str());
  }
}

TEST(Scheduler, StaticShiftFormula) {
  // sigma_i = s * t / (1 + (s - 1) * t), t = 1 - i/N, for a shift the golden data does not cover.
  SchedulerConfig cfg;
  cfg.shift = 3.0f;
  FlowMatchEulerScheduler s(cfg);
  s.set_timesteps(13);
  std::vector<double> want;
  for (int i = 0; i < 13; ++i) want.push_back(3.0 * sigma_hat(i, 13) / (1 + 2.0 * sigma_hat(i, 13)));
  want.push_back(0);
  expect_rel(s.sigmas(), want, 1e-6, "sigmas");
  for (int i = 0; i < 13; ++i) EXPECT_NEAR(s.timesteps()[i], 1000 * want[i], 1e-6 * 1000 * want[i]);
}

TEST(Scheduler, DitTimestepRoundsToBf16) {
  // With bf16 activations the reference builds the timestep tensor in bf16 (text-side-spec §5.3).
  EXPECT_EQ(dit_timestep(994.9238891601562f, DType::BF16), 996.0f);
  EXPECT_EQ(dit_timestep(989.6907348632812f, DType::BF16), 988.0f);
  EXPECT_EQ(dit_timestep(75.4717025756836f, DType::BF16), 75.5f);
  EXPECT_EQ(dit_timestep(1000.0f, DType::BF16), 1000.0f);
  EXPECT_EQ(dit_timestep(994.9238891601562f, DType::F32), 994.9238891601562f);
  EXPECT_THROW(dit_timestep(1.0f, DType::I32), Error);
}

TEST(Scheduler, CalculateShiftFormula) {
  // mu = m * seq + b with m = (max_shift - base_shift) / (max_seq - base_seq), b = base_shift - m * base_seq:
  // base_shift at base_image_seq_len, max_shift at max_image_seq_len, linear in between and beyond.
  SchedulerConfig cfg;  // 0.5 / 1.15 / 256 / 4096
  EXPECT_NEAR(calculate_shift(cfg, 256), 0.5, 1e-7);
  EXPECT_NEAR(calculate_shift(cfg, 4096), 1.15, 1e-7);
  EXPECT_NEAR(calculate_shift(cfg, 1024), 0.5 + 0.65 * 768.0 / 3840.0, 1e-7);
  EXPECT_NEAR(calculate_shift(cfg, 8192), 0.5 + 0.65 * 7936.0 / 3840.0, 1e-7);
}

TEST(Scheduler, DynamicExponentialShift) {
  // sigma_i = e^mu / (e^mu + (1/t - 1)), t = 1 - i/N, mu = calculate_shift(image_seq_len).
  SchedulerConfig cfg;
  cfg.use_dynamic_shifting = true;
  cfg.shift = 7.0f;  // ignored by the dynamic branch
  FlowMatchEulerScheduler s(cfg);
  for (int64_t seq : {256, 1024, 4096}) {
    const double mu = 0.5 + (1.15 - 0.5) * double(seq - 256) / (4096 - 256);
    for (int n : {1, 8, 50}) {
      s.set_timesteps(n, seq);
      std::vector<double> want;
      for (int i = 0; i < n; ++i) want.push_back(std::exp(mu) / (std::exp(mu) + (1 / sigma_hat(i, n) - 1)));
      want.push_back(0);
      expect_rel(s.sigmas(), want, 1e-6, "exponential sigmas");
      ASSERT_EQ(s.timesteps().size(), size_t(n));
      for (int i = 0; i < n; ++i) EXPECT_NEAR(s.timesteps()[i], 1000 * want[i], 1e-6 * 1000 * want[i]);
    }
  }
  // An explicit mu bypasses calculate_shift.
  s.set_timesteps_mu(4, 2.0);
  EXPECT_NEAR(s.sigmas()[1], std::exp(2.0) / (std::exp(2.0) + (1 / 0.75 - 1)), 1e-6);
}

TEST(Scheduler, DynamicLinearShift) {
  // sigma_i = mu / (mu + (1/t - 1)).
  SchedulerConfig cfg;
  cfg.use_dynamic_shifting = true;
  cfg.time_shift_type = "linear";
  FlowMatchEulerScheduler s(cfg);
  const double mu = 0.5 + 0.65 * (2048.0 - 256) / 3840.0;
  s.set_timesteps(10, 2048);
  std::vector<double> want;
  for (int i = 0; i < 10; ++i) want.push_back(mu / (mu + (1 / sigma_hat(i, 10) - 1)));
  want.push_back(0);
  expect_rel(s.sigmas(), want, 1e-6, "linear sigmas");
}

TEST(Scheduler, ShiftTerminalStretch) {
  // sigma'_i = 1 - (1 - sigma_i) / ((1 - sigma_{N-1}) / (1 - terminal)): the last non-zero sigma becomes terminal.
  SchedulerConfig cfg;
  cfg.shift = 4.0f;
  cfg.shift_terminal = 0.1f;
  FlowMatchEulerScheduler s(cfg);
  const int n = 8;
  s.set_timesteps(n);
  std::vector<double> shifted, want;
  for (int i = 0; i < n; ++i) shifted.push_back(4.0 * sigma_hat(i, n) / (1 + 3.0 * sigma_hat(i, n)));
  const double k = (1 - shifted.back()) / (1 - double(0.1f));
  for (double x : shifted) want.push_back(1 - (1 - x) / k);
  want.push_back(0);
  expect_rel(s.sigmas(), want, 1e-6, "stretched sigmas");
  EXPECT_NEAR(s.sigmas()[n - 1], 0.1, 1e-6);
}

TEST(Scheduler, EulerStep) {
  FlowMatchEulerScheduler s(tiny_config());
  s.set_timesteps(4);
  std::vector<float> x = {1.0f, -2.0f, 0.5f, 3.0f, 0.0f, -0.25f}, v = {0.5f, 1.0f, -4.0f, 2.0f, 7.0f, 0.125f};
  const Tensor xt = Tensor::from_vector(x, {1, 2, 3}), vt = Tensor::from_vector(v, {1, 2, 3});
  for (int i = 0; i < 4; ++i) {
    const std::vector<float> got = s.step(xt, vt, i).to_vector();
    const float dt = s.sigmas()[i + 1] - s.sigmas()[i];
    ASSERT_LT(dt, 0.0f);
    for (size_t j = 0; j < x.size(); ++j) EXPECT_FLOAT_EQ(got[j], x[j] + dt * v[j]) << "step " << i << " elem " << j;
  }
  EXPECT_THROW(s.step(xt, vt, 4), Error);
  EXPECT_THROW(s.step(xt, vt, -1), Error);
  EXPECT_THROW(s.step(xt, Tensor::from_vector(v, {2, 3}), 0), Error);
}

TEST(Scheduler, BadSettingsGiveClearErrors) {
  FlowMatchEulerScheduler s(tiny_config());
  EXPECT_THROW(s.set_timesteps(0), Error);
  EXPECT_THROW(s.set_timesteps(-3), Error);
  SchedulerConfig dyn;
  dyn.use_dynamic_shifting = true;
  FlowMatchEulerScheduler d(dyn);
  try {
    d.set_timesteps(8);  // no sequence length
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sequence length"), std::string::npos) << e.what();
  }
  SchedulerConfig lin = dyn;
  lin.time_shift_type = "linear";
  EXPECT_THROW(FlowMatchEulerScheduler(lin).set_timesteps_mu(8, -1.0), Error);
  for (auto set : {+[](SchedulerConfig& c) { c.use_karras_sigmas = true; },
                   +[](SchedulerConfig& c) { c.stochastic_sampling = true; },
                   +[](SchedulerConfig& c) { c.time_shift_type = "cosine"; },
                   +[](SchedulerConfig& c) { c.shift = 0; }, +[](SchedulerConfig& c) { c.shift_terminal = 1.5f; }}) {
    SchedulerConfig c;
    set(c);
    EXPECT_THROW(FlowMatchEulerScheduler{c}, Error);
  }
}
