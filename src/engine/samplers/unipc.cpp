// UniPC in flow-matching form: diffusers' UniPCMultistepScheduler with solver_order 2, solver_type "bh2",
// predict_x0, lower_order_final, use_flow_sigmas, prediction_type "flow_prediction", final_sigmas_type
// "zero", no disabled corrector. Each step first corrects the latents the previous predictor made (UniC,
// with this step's x0 prediction), then predicts the next ones (UniP).
#include <cmath>

#include "engine/samplers/flow_sigmas.h"
#include "engine/samplers/flow_solver.h"

namespace ernie {
namespace {

class UniPCSolver final : public FlowSolver {
 public:
  UniPCSolver(int steps, double shift, int T) {
    // set_timesteps: sigmas = shift(linspace(1, 1/T, N+1)[:-1]); sigmas[0] -= 1e-6 when it is 1 (log(alpha) finite).
    std::vector<double> s = flow::linspace(1.0, 1.0 / double(T), steps + 1);
    s.pop_back();
    for (double& x : s) x = flow::shift_sigma(x, shift);
    if (std::fabs(s[0] - 1.0) < 1e-6) s[0] -= 1e-6;
    flow::finish_schedule(s, T, sigmas_, timesteps_);
  }

  Tensor step(const Tensor& x_in, const Tensor& v, int i) override {
    Tensor m = lincomb({{1.0, x_in}, {-double(sigmas_[size_t(i)]), v}});  // x0_pred, from the uncorrected latents
    Tensor x = x_in;
    if (i > 0 && last_sample_.defined()) x = corrector(m, i);
    // history: m_[0] the older, m_[1] the newest x0 prediction
    m_[0] = m_[1];
    m_[1] = m;
    int order = std::min(2, num_steps() - i);           // lower_order_final
    order = std::min(order, lower_order_nums_ + 1);     // warm-up
    this_order_ = order;
    last_sample_ = x;
    Tensor out = predictor(x, i, order);
    if (lower_order_nums_ < 2) ++lower_order_nums_;
    return out;
  }

 private:
  Tensor m_[2];          // the last two x0 predictions
  Tensor last_sample_;   // the latents the last predictor started from
  int this_order_ = 1, lower_order_nums_ = 0;

  // hh = -h; h_phi_1 = expm1(hh); B(h) = expm1(hh) for bh2.
  struct Coefs {
    double alpha_t, ratio, h_phi_1, B_h, hh;
  };
  Coefs coefs(float sigma_t, float sigma_s0) const {
    const double h = flow::lambda(sigma_t) - flow::lambda(sigma_s0), hh = -h;
    const double e = std::expm1(hh);
    return {1.0 - double(sigma_t), double(sigma_t) / double(sigma_s0), e, e, hh};
  }

  // multistep_uni_p_bh_update: x_t = ratio x - alpha_t h_phi_1 m0 - alpha_t B_h (rho_p D1), rho_p = 0.5 at
  // order 2 with D1 = (m1 - m0) / rk, rk = (lambda_s1 - lambda_s0) / h.
  Tensor predictor(const Tensor& x, int i, int order) const {
    const float sigma_t = sigmas_[size_t(i) + 1], sigma_s0 = sigmas_[size_t(i)];
    const Coefs c = coefs(sigma_t, sigma_s0);
    const Tensor& m0 = m_[1];
    std::vector<std::pair<double, Tensor>> terms = {{c.ratio, x}, {-c.alpha_t * c.h_phi_1, m0}};
    if (order == 2) {
      const double h = -c.hh;
      const double rk = (flow::lambda(sigmas_[size_t(i) - 1]) - flow::lambda(sigma_s0)) / h;
      const double w = -c.alpha_t * c.B_h * 0.5 / rk;  // times (m1 - m0)
      terms.push_back({w, m_[0]});
      terms.push_back({-w, m0});
    }
    return lincomb(terms);
  }

  // multistep_uni_c_bh_update at step i with this step's x0 prediction m_t and the previous order:
  // x_t = ratio x_last - alpha_t h_phi_1 m0 - alpha_t B_h (rho_c[0] D1 + rho_c[-1] (m_t - m0)), the step
  // taken from sigma[i-1] to sigma[i]; rho_c = 0.5 at order 1, else R rho_c = b with R = [[1, 1], [rk, 1]].
  Tensor corrector(const Tensor& m_t, int i) const {
    const float sigma_t = sigmas_[size_t(i)], sigma_s0 = sigmas_[size_t(i) - 1];
    const Coefs c = coefs(sigma_t, sigma_s0);
    const Tensor& m0 = m_[1];
    std::vector<std::pair<double, Tensor>> terms = {{c.ratio, last_sample_}, {-c.alpha_t * c.h_phi_1, m0}};
    const double k = -c.alpha_t * c.B_h;
    if (this_order_ == 1) {
      terms.push_back({k * 0.5, m_t});
      terms.push_back({-k * 0.5, m0});
    } else {
      const double h = -c.hh;
      const double rk = (flow::lambda(sigmas_[size_t(i) - 2]) - flow::lambda(sigma_s0)) / h;
      // b_1 = (h_phi_1 / hh - 1) / B_h; b_2 = 2 (h_phi_2) / B_h with h_phi_2 = (h_phi_1 / hh - 1) / hh - 1/2.
      const double phi_k1 = c.h_phi_1 / c.hh - 1.0, phi_k2 = phi_k1 / c.hh - 0.5;
      const double b1 = phi_k1 / c.B_h, b2 = phi_k2 * 2.0 / c.B_h;
      const double rho0 = (b1 - b2) / (1.0 - rk), rho1 = b1 - rho0;  // [[1, 1], [rk, 1]] [rho0, rho1] = [b1, b2]
      // corr_res = rho0 * D1 with D1 = (m_prev - m0) / rk, m_prev the x0 prediction before m0
      terms.push_back({k * rho0 / rk, m_[0]});
      terms.push_back({-k * rho0 / rk, m0});
      terms.push_back({k * rho1, m_t});
      terms.push_back({-k * rho1, m0});
    }
    return lincomb(terms);
  }
};

}  // namespace

std::unique_ptr<FlowSolver> make_unipc_solver(int steps, double shift, int T) {
  return std::make_unique<UniPCSolver>(steps, shift, T);
}

}  // namespace ernie
