// A flow-matching solver: the sigma schedule of one sampler and its update from the DiT's velocity
// prediction. The sampling loop (engine/sampler.h) asks it for the timesteps, feeds it one velocity per
// step and takes the new latents. Multistep solvers keep their history (previous x0 predictions) inside.
#pragma once
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "engine/samplers/sampler_kind.h"
#include "io/configs.h"

namespace ernie {

class FlowSolver {
 public:
  virtual ~FlowSolver() = default;
  int num_steps() const { return int(timesteps_.size()); }
  const std::vector<float>& sigmas() const { return sigmas_; }        // N + 1, the last is 0
  const std::vector<float>& timesteps() const { return timesteps_; }  // N, what the DiT is given
  // The latents after step i (0-based, called once per step in order) from the latents `x` and the
  // velocity `v` at sigmas()[i]. F32 tensors of one shape on one device.
  virtual Tensor step(const Tensor& x, const Tensor& v, int i) = 0;

 protected:
  std::vector<float> sigmas_, timesteps_;
};

// The solver of `kind` for `steps` steps. `shift` > 0 replaces the model's shift (a fixed shift, also for a
// dynamic-shift config); 0 keeps the model's (config shift, or exp(mu) for image_seq_len DiT tokens under
// use_dynamic_shifting). Throws Error for configs the solver does not support.
std::unique_ptr<FlowSolver> make_flow_solver(SamplerKind kind, const SchedulerConfig& cfg, int steps,
                                             int64_t image_seq_len, float shift = 0);

// The shift a solver built with these arguments uses (what the metadata records).
double effective_shift(const SchedulerConfig& cfg, int64_t image_seq_len, float shift);

// One solver each; the factory dispatches to them.
std::unique_ptr<FlowSolver> make_euler_solver(const SchedulerConfig& cfg, int steps, int64_t image_seq_len);
std::unique_ptr<FlowSolver> make_dpmpp_2m_solver(int steps, double shift, int num_train_timesteps);
std::unique_ptr<FlowSolver> make_unipc_solver(int steps, double shift, int num_train_timesteps);

// Sum of coef_k * t_k over same-shape F32 tensors on one device (the solvers' updates).
Tensor lincomb(const std::vector<std::pair<double, Tensor>>& terms);

}  // namespace ernie
