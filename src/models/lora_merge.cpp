#include "models/lora_merge.h"

#include <cmath>
#include <filesystem>
#include <limits>

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

namespace {
struct Stacked {
  Tensor up, down;  // [out, R] with c folded in, [R, in]; F32 on the device
};
// [up_1·c_1 | up_2·c_2 | ...] and [down_1; down_2; ...] with c = scale · alpha / rank.
Stacked stacked_factors(const LoraSet& set, const std::string& weight, Device device) {
  std::vector<Tensor> ups, downs;
  for (const LoraUse& u : set) {
    auto it = u.adapter->weights.find(weight);
    if (it == u.adapter->weights.end() || u.scale == 0) continue;
    const LoraFactors& f = it->second;
    ups.push_back(ops::scale(f.up.to(device), u.scale * f.alpha / float(f.rank)));
    downs.push_back(f.down.to(device));
  }
  ERNIE_CHECK(!ups.empty(), "LoRA: no adapter of the set changes ", weight);
  return {ups.size() == 1 ? ups[0] : ops::concat(ups, 1), downs.size() == 1 ? downs[0] : ops::concat(downs, 0)};
}
Tensor as(const Tensor& t, DType dt) { return t.dtype() == dt ? t : ops::cast(t, dt); }
// The file names of the adapters of `set` that change `weight`, for messages.
std::string adapter_names(const LoraSet& set, const std::string& weight) {
  std::string names;
  for (const LoraUse& u : set)
    if (u.scale != 0 && u.adapter->weights.count(weight))
      names += (names.empty() ? "" : ", ") + std::filesystem::path(u.adapter->path).filename().string();
  return names;
}
}  // namespace

Tensor lora_delta(const LoraSet& set, const std::string& weight, Device device) {
  const Stacked f = stacked_factors(set, weight, device);
  return ops::linear(f.up, ops::Weight(ops::permute(f.down, {1, 0})));  // up · down = up · (downᵀ)ᵀ
}

LoraSide lora_side(const LoraSet& set, const std::string& weight, Device device, DType act) {
  const Stacked f = stacked_factors(set, weight, device);
  // Unmerged, the side's product is made as each step runs: refuse factors whose product can leave the float
  // range (|up · down| <= rank · max|up| · max|down|), which would give an inf or NaN image.
  const double bound = double(f.down.dim(0)) * double(ops::max_abs(f.up)) * double(ops::max_abs(f.down));
  if (!(bound <= double(std::numeric_limits<float>::max())))
    fail("LoRA ", adapter_names(set, weight), ": its product for ", weight, " can reach ", std::to_string(bound),
         ", past the float range (non-finite weights: its factors or scale are far too large); lower the scale or ",
         "use another LoRA");
  return {as(f.down, act), as(f.up, act)};
}

LoraSide stack_lora_sides(const std::vector<LoraSide>& parts, const std::vector<int64_t>& rows, Device device,
                          DType act) {
  ERNIE_CHECK(parts.size() == rows.size(), "stack_lora_sides: ", std::to_string(parts.size()), " parts, ",
              std::to_string(rows.size()), " row counts");
  int64_t R = 0;
  std::vector<Tensor> downs;
  for (const LoraSide& p : parts)
    if (p.defined()) R += p.down.dim(0), downs.push_back(as(p.down, act));
  if (downs.empty()) return {};
  std::vector<Tensor> ups;  // part i's rows: [0 | up_i | 0] over the stacked rank
  int64_t at = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const int64_t r = parts[i].defined() ? parts[i].up.dim(1) : 0;
    std::vector<Tensor> cols;
    if (at > 0) cols.push_back(Tensor::zeros({rows[i], at}, act, device));
    if (r > 0) cols.push_back(as(parts[i].up, act));
    if (R - at - r > 0) cols.push_back(Tensor::zeros({rows[i], R - at - r}, act, device));
    ups.push_back(cols.size() == 1 ? cols[0] : ops::concat(cols, 1));
    at += r;
  }
  return {downs.size() == 1 ? downs[0] : ops::concat(downs, 0), ops::concat(ups, 0)};
}

Tensor merge_lora(const Tensor& base, const LoraSet& set, const std::string& weight, Device device) {
  Tensor w = base.to(device);
  if (w.dtype() != DType::F32) w = ops::cast(w, DType::F32);
  const Tensor delta = lora_delta(set, weight, device);
  ERNIE_CHECK(delta.numel() == w.numel(), "LoRA for ", weight, ": delta ", shape_str(delta.shape()),
              " does not fit the weight ", shape_str(w.shape()));
  Tensor merged = ops::add(w, delta.reshape(w.shape()));
  // Finite factors can still overflow (A = B = 1e38): an inf or NaN weight would make a black image, exit 0.
  if (!std::isfinite(ops::max_abs(merged)))
    fail("LoRA ", adapter_names(set, weight), ": merging into ", weight, " gives non-finite weights (inf or NaN: ",
         "its factors or scale are far too large); lower the scale or use another LoRA");
  return merged;
}

}  // namespace ernie
