#include "engine/scheduler.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "ops/ops.h"

namespace ernie {

namespace {
// fp32 arithmetic, one rounding per operation as numpy/torch do it. Each op is computed in double and rounded
// once to float: for + - * / a double intermediate followed by rounding to float gives exactly the
// correctly-rounded float result (53 >= 2*24 + 2), and the explicit rounding keeps the compiler from fusing
// a multiply and an add into an FMA, which would change the last bit.
float add(float a, float b) { return float(double(a) + double(b)); }
float sub(float a, float b) { return float(double(a) - double(b)); }
float mul(float a, float b) { return float(double(a) * double(b)); }
float div(float a, float b) { return float(double(a) / double(b)); }

// torch.linspace(1, 0, n + 1)[:-1] in fp32 on the CPU: step = (end - start) / (steps - 1); the first half is
// start + step * i (evaluated as one fused multiply-add by the compiled kernel), the second half
// end - step * (steps - 1 - i), so the end points are exact.
std::vector<float> linspace_1_to_0(int n) {
  const int64_t steps = int64_t(n) + 1, halfway = steps / 2;
  const float step = div(-1.0f, float(n));
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[size_t(i)] = i < halfway ? float(1.0 + double(step) * double(i))  // exact in double, rounded once
                               : sub(0.0f, mul(step, float(steps - 1 - i)));
  return v;
}
}  // namespace

double calculate_shift(const SchedulerConfig& c, int64_t image_seq_len) {
  const double m = (double(c.max_shift) - double(c.base_shift)) / double(c.max_image_seq_len - c.base_image_seq_len);
  const double b = double(c.base_shift) - m * double(c.base_image_seq_len);
  return double(image_seq_len) * m + b;
}

float dit_timestep(float t, DType act) {
  switch (act) {
    case DType::F32: return t;
    case DType::BF16: return round_bf16(t);
    case DType::F16: return f16_to_f32(f32_to_f16(t));
    default: fail("dit_timestep: activation dtype ", dtype_name(act), " is not a float compute type");
  }
}

FlowMatchEulerScheduler::FlowMatchEulerScheduler(const SchedulerConfig& cfg) : cfg_(cfg) {
  const std::string where = "scheduler/scheduler_config.json: ";
  ERNIE_CHECK(!cfg.use_karras_sigmas && !cfg.use_exponential_sigmas && !cfg.use_beta_sigmas, where,
              "karras/exponential/beta sigmas are not supported by this engine");
  ERNIE_CHECK(!cfg.stochastic_sampling, where, "stochastic_sampling is not supported by this engine");
  ERNIE_CHECK(cfg.num_train_timesteps > 0, where, "num_train_timesteps must be positive");
  ERNIE_CHECK(cfg.shift > 0 && std::isfinite(cfg.shift), where, "shift must be a positive number");
  ERNIE_CHECK(cfg.time_shift_type == "exponential" || cfg.time_shift_type == "linear", where, "time_shift_type '",
              cfg.time_shift_type, "' is not supported (exponential, linear)");
  ERNIE_CHECK(cfg.shift_terminal >= 0 && cfg.shift_terminal < 1, where, "shift_terminal ",
              std::to_string(cfg.shift_terminal), " must be in [0, 1)");
  ERNIE_CHECK(!cfg.use_dynamic_shifting || cfg.max_image_seq_len != cfg.base_image_seq_len, where,
              "base_image_seq_len equals max_image_seq_len; the dynamic shift is undefined");
}

void FlowMatchEulerScheduler::set_timesteps(int steps, int64_t image_seq_len) {
  if (!cfg_.use_dynamic_shifting) return build(steps, false, 0);
  ERNIE_CHECK(image_seq_len > 0, "scheduler: use_dynamic_shifting needs the image sequence length (got ",
              std::to_string(image_seq_len), ")");
  build(steps, true, calculate_shift(cfg_, image_seq_len));
}

void FlowMatchEulerScheduler::set_timesteps_mu(int steps, double mu) {
  build(steps, cfg_.use_dynamic_shifting, mu);
}

void FlowMatchEulerScheduler::build(int steps, bool dynamic, double mu) {
  ERNIE_CHECK(steps >= 1 && steps <= 10000, "scheduler: steps must be in [1, 10000], got ", std::to_string(steps));
  ERNIE_CHECK(!dynamic || std::isfinite(mu), "scheduler: the dynamic shift mu must be finite");
  ERNIE_CHECK(!dynamic || cfg_.time_shift_type != "linear" || mu > 0,
              "scheduler: the linear time shift needs mu > 0, got ", std::to_string(mu));
  std::vector<float> s = linspace_1_to_0(steps);
  for (float& x : s) {
    const float r = sub(div(1.0f, x), 1.0f);  // (1/t - 1) ** 1.0
    if (!dynamic) {
      // shift * s / (1 + (shift - 1) * s)
      x = div(mul(cfg_.shift, x), add(1.0f, mul(float(double(cfg_.shift) - 1.0), x)));
    } else if (cfg_.time_shift_type == "exponential") {
      const float e = float(std::exp(mu));  // exp(mu) / (exp(mu) + (1/t - 1))
      x = div(e, add(e, r));
    } else {
      const float m = float(mu);  // mu / (mu + (1/t - 1))
      x = div(m, add(m, r));
    }
  }
  if (cfg_.shift_terminal > 0) {
    // Stretch so the last sigma becomes shift_terminal: 1 - (1 - s) / ((1 - s[-1]) / (1 - shift_terminal)).
    const float scale_factor = div(sub(1.0f, s.back()), float(1.0 - double(cfg_.shift_terminal)));
    for (float& x : s) x = sub(1.0f, div(sub(1.0f, x), scale_factor));
  }
  timesteps_.resize(s.size());
  for (size_t i = 0; i < s.size(); ++i) timesteps_[i] = mul(s[i], float(cfg_.num_train_timesteps));
  s.push_back(0.0f);
  sigmas_ = std::move(s);
}

Tensor FlowMatchEulerScheduler::step(const Tensor& sample, const Tensor& v, int i) const {
  ERNIE_CHECK(i >= 0 && i < num_steps(), "scheduler step ", std::to_string(i), " is outside [0, ",
              std::to_string(num_steps()), ")");
  ERNIE_CHECK(sample.shape() == v.shape(), "scheduler step: sample ", shape_str(sample.shape()),
              " and velocity ", shape_str(v.shape()), " differ in shape");
  const float dt = sub(sigmas_[size_t(i) + 1], sigmas_[size_t(i)]);
  return ops::add(sample, ops::scale(v, dt));
}

}  // namespace ernie
