// Merging LoRA adapters into the DiT's weights at load (ErnieDit::load / random take a LoraSet): in F32 on the
// model's device, from the weight as stored, before any cast to BF16 or quantization. A new set is a new load
// from the file, so every set starts from the exact base weights (nothing is ever subtracted).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/lora_file.h"

namespace ernie {

struct LoraUse {
  std::shared_ptr<const LoraAdapter> adapter;
  float scale = 1;
};
using LoraSet = std::vector<LoraUse>;  // stacked: their deltas add up

// Throws an Error naming `what` unless -16 <= scale <= 16 (and finite): A1111 and ComfyUI users write 0..2.
void check_lora_scale(float scale, const std::string& what);

// Some adapter of `set` changes `weight` (a DiT checkpoint name).
bool lora_adapts(const LoraSet& set, const std::string& weight);

// Σ scale · (alpha / rank) · up · down over the adapters of `set` that change `weight`: one GEMM over the
// stacked factors, F32 [out, in] on `device`.
Tensor lora_delta(const LoraSet& set, const std::string& weight, Device device);

// An adapter kept unmerged (--lora-apply-mode at_runtime, for 8-bit weights): y = x·Wᵀ + (x·downᵀ)·upᵀ, the
// set's factors stacked and c = scale · alpha / rank folded into up.
struct LoraSide {
  Tensor down, up;  // [R, in], [out, R], in `act` on the device
  bool defined() const { return down.defined(); }
};
LoraSide lora_side(const LoraSet& set, const std::string& weight, Device device, DType act);
// The side of weights whose outputs are stacked by rows (q|k|v as one GEMM): their downs stacked, their ups
// block-diagonal. rows[i]: part i's output features; a part without an adapter is undefined (zero rows of up).
LoraSide stack_lora_sides(const std::vector<LoraSide>& parts, const std::vector<int64_t>& rows, Device device,
                          DType act);

// base + lora_delta in F32 on `device` (base: any float dtype, any device; [out, in] or a 1x1 conv's [out, in, 1, 1],
// returned in its shape).
Tensor merge_lora(const Tensor& base, const LoraSet& set, const std::string& weight, Device device);

}  // namespace ernie
