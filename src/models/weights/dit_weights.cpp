#include "models/weights/dit_weights.h"

#include "core/error.h"
#include "io/model_folder.h"

namespace ernie {

namespace {
bool is_fp8(const ops::Weight& w) { return w.quantized() && w.w.dtype() == DType::F8_E4M3; }
// The value of a weight's static activation scale (convert --calibrate); 0 without one.
float static_scale(const ops::Weight& w) { return w.input_scale.defined() ? w.input_scale.to(kCPU).f32()[0] : 0.f; }
// An 8-bit weight (and its static activation scale) or GGML blocks on `device`.
ops::Weight to_device(const ops::Weight& w, Device device) {
  ops::Weight d = w;
  d.w = w.w.to(device);
  if (w.scale.defined()) d.scale = w.scale.to(device);
  if (w.input_scale.defined()) d.input_scale = w.input_scale.to(device);
  return d;
}
// Stored in a compact form (8-bit with row scales, or GGML blocks) rather than as floats.
bool compact(const ops::Weight& w) { return w.quantized() || w.blocks(); }
}  // namespace

DitWeights::DitWeights(const DitConfig& cfg, Device device, DType act, Source stored, std::optional<DType> quantize,
                       const QuantPolicy& policy, const LoraSet& loras, bool lora_at_runtime)
    : cfg_(cfg), device_(device), act_(act), stored_(std::move(stored)), quantize_(quantize), policy_(policy),
      loras_(loras), lora_at_runtime_(lora_at_runtime) {
  for (const TensorSpec& s : dit_tensor_specs(cfg)) shapes_[s.name] = s.shape;
}

bool DitWeights::quantized_here(const std::string& name) const {
  return quantize_ && policy_.quantized("transformer", name, cfg_.num_layers);
}

Tensor DitWeights::place(const Tensor& host) const {
  Tensor t = host.to(device_);
  if (device_.is_cuda() && act_ == DType::BF16 && t.dtype() != DType::BF16) t = ops::cast(t, DType::BF16);
  return t;
}

Tensor DitWeights::streamed(const Tensor& t) const {
  return act_ == DType::BF16 && t.dtype() != DType::BF16 ? place(t) : t;
}

ops::Weight DitWeights::merged(const std::string& name, bool block_linear) {
  ops::Weight t = stored_(name);
  if (!lora_adapts(loras_, name) || !t.defined() || t.shape() != shapes_.at(name)) return t;
  if (lora_at_runtime_ && block_linear && (compact(t) || quantized_here(name))) {
    sides_[name] = lora_side(loras_, name, device_, act_);
    return t;
  }
  Tensor m = merge_lora(compact(t) ? ops::dequantize(to_device(t, device_)) : t.w, loras_, name, device_);
  if (!t.quantized()) return ops::Weight(m);
  ops::Weight requantized = ops::quantize(m, t.w.dtype());
  if (t.input_scale.defined()) requantized.input_scale = t.input_scale.to(device_);
  return requantized;
}

ops::Weight DitWeights::checked(const std::string& name, bool block_linear) {
  ops::Weight t = merged(name, block_linear);
  ERNIE_CHECK(t.defined() && t.shape() == shapes_.at(name), "transformer: tensor ", name, " has shape ",
              shape_str(t.defined() ? t.shape() : Shape{}), ", expected ", shape_str(shapes_.at(name)));
  ERNIE_CHECK(compact(t) || dtype_is_float(t.w.dtype()), "transformer: tensor ", name, " has non-float dtype ",
              dtype_name(t.w.dtype()));
  return t;
}

Tensor DitWeights::float_weight(const std::string& name) {
  ops::Weight t = checked(name);
  return compact(t) ? ops::dequantize(t.blocks() ? to_device(t, device_) : t) : t.w;
}

Tensor DitWeights::resident(const std::string& name) { return place(float_weight(name)); }

Tensor DitWeights::block_tensor(const std::string& name, bool streaming) {
  return streaming ? streamed(float_weight(name)) : resident(name);
}

ops::Weight DitWeights::block_linear(const std::string& name, bool streaming) {
  ops::Weight t = checked(name, true);
  if (t.blocks() && quantized_here(name))
    return ops::quantize(place(ops::dequantize(to_device(t, device_))), *quantize_);
  if (compact(t)) return streaming ? t : to_device(t, device_);
  if (quantized_here(name)) return ops::quantize(place(t.w), *quantize_);
  return streaming ? streamed(t.w) : place(t.w);
}

LoraSide DitWeights::side(const std::string& name) const {
  auto it = sides_.find(name);
  return it == sides_.end() ? LoraSide{} : it->second;
}

void check_shared_input_scale(std::initializer_list<const ops::Weight*> readers, const std::string& what) {
  bool all_fp8 = true, any_static = false;
  for (const ops::Weight* r : readers) all_fp8 &= is_fp8(*r), any_static |= r->input_scale.defined();
  if (!all_fp8 || !any_static) return;
  const float first = static_scale(**readers.begin());
  for (const ops::Weight* r : readers)
    ERNIE_CHECK(static_scale(*r) == first, "transformer: ", what,
                " read one input, so their static activation scales (_input_scale) must be equal");
}

void stack_by_rows(const std::vector<ops::Weight*>& parts, ops::Weight& into) {
  const float first = static_scale(*parts[0]);
  for (const ops::Weight* p : parts)
    if (p->w.dtype() != parts[0]->w.dtype() || p->w.device() != parts[0]->w.device() ||
        p->quantized() != parts[0]->quantized() || p->ggml != parts[0]->ggml || static_scale(*p) != first)
      return;
  std::vector<Tensor> ws, scales;
  for (const ops::Weight* p : parts) ws.push_back(p->w), scales.push_back(p->scale);
  into.w = ops::concat(ws, 0);
  into.ggml = parts[0]->ggml, into.cols = parts[0]->cols;  // GGML blocks stack by rows as they are
  if (parts[0]->quantized()) into.scale = ops::concat(scales, 0);
  into.input_scale = parts[0]->input_scale;
  for (ops::Weight* p : parts) *p = ops::Weight();
}

}  // namespace ernie
