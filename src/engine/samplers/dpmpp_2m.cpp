// DPM-Solver++(2M) in flow-matching form: diffusers' DPMSolverMultistepScheduler with algorithm_type
// "dpmsolver++", solver_order 2, solver_type "midpoint", lower_order_final, use_flow_sigmas,
// prediction_type "flow_prediction", final_sigmas_type "zero". alpha_t = 1 - sigma_t,
// lambda_t = log(alpha_t) - log(sigma_t); the model output becomes x0 = x - sigma * v.
#include <cmath>

#include "engine/samplers/flow_sigmas.h"
#include "engine/samplers/flow_solver.h"

namespace ernie {
namespace {

class DpmPP2MSolver final : public FlowSolver {
 public:
  DpmPP2MSolver(int steps, double shift, int T) {
    // set_timesteps: alphas = linspace(1, 1/T, N+1); sigmas = flip(shift(1 - alphas))[:-1].
    std::vector<double> alphas = flow::linspace(1.0, 1.0 / double(T), steps + 1), s;
    for (int k = steps; k >= 1; --k) s.push_back(flow::shift_sigma(1.0 - alphas[size_t(k)], shift));
    flow::finish_schedule(s, T, sigmas_, timesteps_);
  }

  Tensor step(const Tensor& x, const Tensor& v, int i) override {
    const float sigma_s0 = sigmas_[size_t(i)], sigma_t = sigmas_[size_t(i) + 1];
    Tensor m0 = lincomb({{1.0, x}, {-double(sigma_s0), v}});  // convert_model_output: x0_pred
    const bool first = lower_order_nums_ < 1;
    const bool lower_order_final = i == num_steps() - 1;  // final_sigmas_type "zero": always first order
    const double alpha_t = 1.0 - double(sigma_t);
    const double h = flow::lambda(sigma_t) - flow::lambda(sigma_s0);
    const double ratio = double(sigma_t) / double(sigma_s0), em1 = std::exp(-h) - 1.0;  // 0 and -1 at sigma_t 0
    Tensor out;
    if (first || lower_order_final) {
      // dpm_solver_first_order_update: (sigma_t / sigma_s) x - alpha_t (e^-h - 1) x0
      out = lincomb({{ratio, x}, {-alpha_t * em1, m0}});
    } else {
      // multistep_dpm_solver_second_order_update, midpoint:
      // D0 = m0, D1 = (m0 - m1) / r0 with r0 = h_0 / h;  x_t = ratio x - alpha_t (e^-h - 1) (D0 + D1 / 2)
      const double h_0 = flow::lambda(sigma_s0) - flow::lambda(sigmas_[size_t(i) - 1]);
      const double r0 = h_0 / h;
      Tensor D1 = lincomb({{1.0 / r0, m0}, {-1.0 / r0, m1_}});
      out = lincomb({{ratio, x}, {-alpha_t * em1, m0}, {-0.5 * alpha_t * em1, D1}});
    }
    m1_ = m0;
    if (lower_order_nums_ < 2) ++lower_order_nums_;
    return out;
  }

 private:
  Tensor m1_;  // the previous step's x0 prediction
  int lower_order_nums_ = 0;
};

}  // namespace

std::unique_ptr<FlowSolver> make_dpmpp_2m_solver(int steps, double shift, int T) {
  return std::make_unique<DpmPP2MSolver>(steps, shift, T);
}

}  // namespace ernie
