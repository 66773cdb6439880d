// The use_flow_sigmas schedule shared by diffusers' DPMSolverMultistepScheduler and UniPCMultistepScheduler:
// numpy float64 arithmetic, then sigmas to float32 with a final 0, and timesteps = int64(sigma * T) (truncated),
// which the pipeline hands the DiT as a float.
#pragma once
#include <cstdint>
#include <vector>

namespace ernie::flow {

// numpy.linspace(start, stop, num) in float64: start + i * ((stop - start) / (num - 1)), the last exactly stop.
std::vector<double> linspace(double start, double stop, int num);

// shift * s / (1 + (shift - 1) * s), as numpy evaluates it.
double shift_sigma(double s, double shift);

// Fills float32 sigmas (+ a trailing 0) and truncated timesteps from the float64 sigmas.
void finish_schedule(const std::vector<double>& sigmas, int num_train_timesteps, std::vector<float>& out_sigmas,
                     std::vector<float>& out_timesteps);

// lambda = log(alpha) - log(sigma) with alpha = 1 - sigma (flow sigmas); +inf at sigma 0.
double lambda(float sigma);

}  // namespace ernie::flow
