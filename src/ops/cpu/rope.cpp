// Rotate-half RoPE with caller-filled full-width cos/sin tables:
//   out[i] = x[i]·cos[i] + rot(x)[i]·sin[i],  rot(x) = concat(-x[D/2:], x[:D/2]).
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/cpu_util.h"
#include "ops/shape_rules.h"

namespace ernie::cpu {

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  detail::check_act(x, "rope", "x");
  detail::check_act(cos, "rope", "cos");
  detail::check_act(sin, "rope", "sin");
  ops::rules::rope(x, cos, sin);
  const int64_t b = x.dim(0), s = x.dim(1), h = x.dim(2), d = x.dim(3);
  const int64_t tb = cos.dim(0) == 1 ? 0 : s * d, half = d / 2;
  Tensor y = Tensor::empty(x.shape(), DType::F32);
  const float *xp = x.f32(), *cp = cos.f32(), *sp = sin.f32();
  float* o = y.f32();
#pragma omp parallel for collapse(2) schedule(static) if (detail::worth_threads(x.numel()))
  for (int64_t i = 0; i < b; ++i)
    for (int64_t t = 0; t < s; ++t) {
      const float* c = cp + i * tb + t * d;
      const float* sn = sp + i * tb + t * d;
      for (int64_t k = 0; k < h; ++k) {
        const float* a = xp + ((i * s + t) * h + k) * d;
        float* r = o + ((i * s + t) * h + k) * d;
        for (int64_t j = 0; j < half; ++j) r[j] = a[j] * c[j] - a[j + half] * sn[j];
        for (int64_t j = half; j < d; ++j) r[j] = a[j] * c[j] + a[j - half] * sn[j];
      }
    }
  return y;
}

}  // namespace ernie::cpu
