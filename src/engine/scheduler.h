// FlowMatchEulerDiscreteScheduler as the ERNIE-Image pipeline drives it (diffusers
// scheduling_flow_match_euler_discrete.py, pipeline_ernie_image.py): the pipeline hands it
// sigmas = linspace(1, 0, N+1)[:-1]; set_timesteps shifts them (static `shift`, or the resolution-dependent
// exponential/linear time shift), optionally stretches them to `shift_terminal`, and appends a trailing 0.
// All arithmetic is fp32, rounded op by op as numpy/torch do, so sigmas match the reference bit for bit.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "io/configs.h"

namespace ernie {

// The dynamic-shift exponent mu for `image_seq_len` DiT tokens (the pipelines' calculate_shift):
// linear in the sequence length through (base_image_seq_len, base_shift) and (max_image_seq_len, max_shift).
double calculate_shift(const SchedulerConfig& cfg, int64_t image_seq_len);

// The timestep value the DiT receives: the reference builds it in the transformer's dtype, so with BF16
// activations 994.92 becomes 996; with F32 it is passed unchanged.
float dit_timestep(float t, DType act);

class FlowMatchEulerScheduler {
 public:
  // Throws Error for options this scheduler does not implement (karras/exponential/beta sigmas, ...).
  explicit FlowMatchEulerScheduler(const SchedulerConfig& cfg);

  // Builds the schedule for `steps` steps. `image_seq_len` (DiT tokens: (H/16)*(W/16) released) is needed
  // only with use_dynamic_shifting; it then sets mu = calculate_shift(cfg, image_seq_len).
  void set_timesteps(int steps, int64_t image_seq_len = 0);
  // Same, with an explicit mu for the dynamic shift (set_timesteps(..., mu=...) in diffusers).
  void set_timesteps_mu(int steps, double mu);

  int num_steps() const { return int(timesteps_.size()); }
  const std::vector<float>& sigmas() const { return sigmas_; }        // N+1, the last is 0
  const std::vector<float>& timesteps() const { return timesteps_; }  // N, sigma * num_train_timesteps

  // One Euler step of the velocity `v` at step i: sample + (sigma[i+1] - sigma[i]) * v.
  Tensor step(const Tensor& sample, const Tensor& v, int i) const;

 private:
  void build(int steps, bool dynamic, double mu);
  SchedulerConfig cfg_;
  std::vector<float> sigmas_, timesteps_;
};

}  // namespace ernie
