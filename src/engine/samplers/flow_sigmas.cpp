#include "engine/samplers/flow_sigmas.h"

#include <cmath>
#include <limits>

namespace ernie::flow {

std::vector<double> linspace(double start, double stop, int num) {
  std::vector<double> y(static_cast<size_t>(num));
  if (num == 1) {
    y[0] = start;
    return y;
  }
  const double step = (stop - start) / double(num - 1);
  for (int i = 0; i < num; ++i) {
    volatile double p = double(i) * step;  // two roundings, as numpy (no fused multiply-add)
    y[size_t(i)] = p + start;
  }
  y.back() = stop;
  return y;
}

double shift_sigma(double s, double shift) {
  volatile double num = shift * s, den = (shift - 1.0) * s;
  return num / (1.0 + den);
}

void finish_schedule(const std::vector<double>& sigmas, int T, std::vector<float>& out_sigmas,
                     std::vector<float>& out_timesteps) {
  out_sigmas.clear();
  out_timesteps.clear();
  for (double s : sigmas) {
    out_sigmas.push_back(float(s));
    volatile double t = s * double(T);
    out_timesteps.push_back(float(int64_t(t)));  // .astype(np.int64) truncates
  }
  out_sigmas.push_back(0.0f);  // final_sigmas_type "zero"
}

double lambda(float sigma) {
  if (sigma <= 0) return std::numeric_limits<double>::infinity();
  return std::log(1.0 - double(sigma)) - std::log(double(sigma));
}

}  // namespace ernie::flow
