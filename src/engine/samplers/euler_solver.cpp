// Euler: FlowMatchEulerDiscreteScheduler (engine/scheduler.h), the model's own sampler.
#include "engine/samplers/flow_solver.h"
#include "engine/scheduler.h"

namespace ernie {
namespace {

class EulerSolver final : public FlowSolver {
 public:
  EulerSolver(const SchedulerConfig& cfg, int steps, int64_t image_seq_len) : s_(cfg) {
    s_.set_timesteps(steps, image_seq_len);
    sigmas_ = s_.sigmas();
    timesteps_ = s_.timesteps();
  }
  Tensor step(const Tensor& x, const Tensor& v, int i) override { return s_.step(x, v, i); }

 private:
  FlowMatchEulerScheduler s_;
};

}  // namespace

std::unique_ptr<FlowSolver> make_euler_solver(const SchedulerConfig& cfg, int steps, int64_t image_seq_len) {
  return std::make_unique<EulerSolver>(cfg, steps, image_seq_len);
}

}  // namespace ernie
