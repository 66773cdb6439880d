// The DiT's weight policy at load (ErnieDit::build asks it for each weight by its checkpoint name), so that the
// model itself only names its modules:
// - LoRA adapters are merged into the weights they change (models/lora_merge.h: F32 on the device, before any
//   cast or quantization; a weight stored 8-bit is expanded, merged and quantized again in its format, keeping
//   its static activation scale; GGML blocks become float weights). With `lora_at_runtime`, an adapted block
//   linear that is 8-bit (stored so, or quantized here) keeps its exact base weight and its adapters wait
//   beside it (side()).
// - Every weight is checked against the config's shape and for a float (or 8-bit / GGML) dtype.
// - Float weights go to the device, cast to BF16 there when the activations are BF16 on CUDA; 8-bit weights and
//   GGML blocks are expanded where a float one is needed.
// - Block linears stay 8-bit or GGML blocks as stored, or are quantized here when `quantize` is set and the
//   QuantPolicy picks them (GGML blocks are then expanded first).
// - A streamed block's weights (`streaming`) stay on the host unless a cast is needed (the block streamer
//   copies them into pinned memory either way).
#pragma once
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "io/configs.h"
#include "models/lora_merge.h"
#include "models/quant_policy.h"
#include "ops/ops.h"

namespace ernie {

class DitWeights {
 public:
  // `stored`: checkpoint name -> the stored weight (host or device; float, 8-bit with row scales, or GGML blocks).
  using Source = std::function<ops::Weight(const std::string& name)>;
  DitWeights(const DitConfig& cfg, Device device, DType act, Source stored, std::optional<DType> quantize,
             const QuantPolicy& policy, const LoraSet& loras, bool lora_at_runtime);

  Tensor resident(const std::string& name);                        // a float weight on the device
  Tensor block_tensor(const std::string& name, bool streaming);    // a block's float weight (norms)
  ops::Weight block_linear(const std::string& name, bool streaming);
  // The adapters kept beside the 8-bit block linear `name` (lora_at_runtime); undefined when merged or none.
  LoraSide side(const std::string& name) const;
  int64_t rows(const std::string& name) const { return shapes_.at(name)[0]; }  // a weight's output features

 private:
  bool quantized_here(const std::string& name) const;
  ops::Weight merged(const std::string& name, bool block_linear);  // stored, with its adapters merged
  ops::Weight checked(const std::string& name, bool block_linear = false);
  Tensor float_weight(const std::string& name);
  Tensor place(const Tensor& host) const;     // -> device, BF16 there when the activations are
  Tensor streamed(const Tensor& t) const;     // a streamed block's weight: placed only when it needs a cast

  DitConfig cfg_;
  Device device_;
  DType act_;
  Source stored_;
  std::optional<DType> quantize_;
  QuantPolicy policy_;
  LoraSet loras_;
  bool lora_at_runtime_;
  std::map<std::string, Shape> shapes_;       // every tensor the config implies
  std::map<std::string, LoraSide> sides_;
};

// fp8 weights that read one input share one quantization of it (norm_modulate): with static activation scales,
// those must be one scale. Throws naming `what` (the modules) otherwise.
void check_shared_input_scale(std::initializer_list<const ops::Weight*> readers, const std::string& what);

// `parts` stacked by rows into `into` (one GEMM for several; 8-bit ones with their row scales, GGML blocks as
// they are), the parts then unset, when they are stored alike (dtype, device, format, static activation scale);
// otherwise nothing changes.
void stack_by_rows(const std::vector<ops::Weight*>& parts, ops::Weight& into);

}  // namespace ernie
