#include "models/lora_merge.h"

#include <cmath>

#include "core/error.h"
#include "ops/ops.h"

namespace ernie {

void check_lora_scale(float scale, const std::string& what) {
  ERNIE_CHECK(std::isfinite(scale) && std::fabs(scale) <= 16.f, what, ": LoRA scale ", std::to_string(scale),
              " is not a number from -16 to 16");
}

bool lora_adapts(const LoraSet& set, const std::string& weight) {
  for (const LoraUse& u : set)
    if (u.scale != 0 && u.adapter->weights.count(weight)) return true;
  return false;
}

Tensor lora_delta(const LoraSet& set, const std::string& weight, Device device) {
  // [up_1·c_1 | up_2·c_2 | ...] · [down_1; down_2; ...] with c = scale · alpha / rank.
  std::vector<Tensor> ups, downs;
  for (const LoraUse& u : set) {
    auto it = u.adapter->weights.find(weight);
    if (it == u.adapter->weights.end() || u.scale == 0) continue;
    const LoraFactors& f = it->second;
    ups.push_back(ops::scale(f.up.to(device), u.scale * f.alpha / float(f.rank)));
    downs.push_back(f.down.to(device));
  }
  ERNIE_CHECK(!ups.empty(), "lora_delta: no adapter of the set changes ", weight);
  Tensor up = ups.size() == 1 ? ups[0] : ops::concat(ups, 1);        // [out, R]
  Tensor down = downs.size() == 1 ? downs[0] : ops::concat(downs, 0);  // [R, in]
  return ops::linear(up, ops::Weight(ops::permute(down, {1, 0})));     // up · down = up · (downᵀ)ᵀ
}

Tensor merge_lora(const Tensor& base, const LoraSet& set, const std::string& weight, Device device) {
  Tensor w = base.to(device);
  if (w.dtype() != DType::F32) w = ops::cast(w, DType::F32);
  const Tensor delta = lora_delta(set, weight, device);
  ERNIE_CHECK(delta.numel() == w.numel(), "LoRA for ", weight, ": delta ", shape_str(delta.shape()),
              " does not fit the weight ", shape_str(w.shape()));
  return ops::add(w, delta.reshape(w.shape()));
}

}  // namespace ernie
