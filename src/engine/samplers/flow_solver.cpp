// The solver factory, the shift it resolves to, and lincomb.
#include "engine/samplers/flow_solver.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "engine/scheduler.h"
#include "ops/ops.h"

namespace ernie {

double effective_shift(const SchedulerConfig& cfg, int64_t image_seq_len, float shift) {
  if (shift > 0) return shift;
  if (!cfg.use_dynamic_shifting) return cfg.shift;
  ERNIE_CHECK(cfg.time_shift_type == "exponential", "scheduler: the linear dynamic time shift has no fixed shift ",
              "for the multistep samplers; give --shift");
  return std::exp(calculate_shift(cfg, image_seq_len));  // diffusers: flow_shift = exp(mu)
}

std::unique_ptr<FlowSolver> make_flow_solver(SamplerKind kind, const SchedulerConfig& cfg, int steps,
                                             int64_t image_seq_len, float shift) {
  ERNIE_CHECK(std::isfinite(shift) && shift >= 0, "--shift ", std::to_string(shift), " must be a positive number");
  ERNIE_CHECK(steps >= 1 && steps <= 10000, "scheduler: steps must be in [1, 10000], got ", std::to_string(steps));
  if (kind == SamplerKind::Euler) {
    SchedulerConfig c = cfg;
    if (shift > 0) {  // a fixed shift replaces the config's, dynamic or not
      c.shift = shift;
      c.use_dynamic_shifting = false;
    }
    return make_euler_solver(c, steps, image_seq_len);
  }
  ERNIE_CHECK(cfg.num_train_timesteps > 0, "scheduler: num_train_timesteps must be positive");
  ERNIE_CHECK(!cfg.use_karras_sigmas && !cfg.use_exponential_sigmas && !cfg.use_beta_sigmas,
              "scheduler/scheduler_config.json: karras/exponential/beta sigmas are not supported by this engine");
  const double s = effective_shift(cfg, image_seq_len, shift);
  ERNIE_CHECK(std::isfinite(s) && s > 0, "scheduler: shift ", std::to_string(s), " must be a positive number");
  if (kind == SamplerKind::DpmPP2M) return make_dpmpp_2m_solver(steps, s, cfg.num_train_timesteps);
  return make_unipc_solver(steps, s, cfg.num_train_timesteps);
}

Tensor lincomb(const std::vector<std::pair<double, Tensor>>& terms) {
  ERNIE_CHECK(!terms.empty(), "lincomb: no terms");
  Tensor acc;
  for (const auto& [c, t] : terms) {
    if (c == 0) continue;
    Tensor x = c == 1 ? t : ops::scale(t, float(c));
    acc = acc.defined() ? ops::add(acc, x) : x;
  }
  return acc.defined() ? acc : ops::scale(terms[0].second, 0.0f);
}

}  // namespace ernie
