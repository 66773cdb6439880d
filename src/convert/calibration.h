// Static activation scales for fp8 weights (`convert --calibrate`): the model runs in float over a list of
// prompts, and every DiT block linear records the largest |input| it sees in any step. convert then stores
// scale = that / 448 next to each fp8 weight ("<name>_input_scale"), and ops::linear quantizes the input
// with it instead of with a dynamic scale per token.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ernie {

struct CalibrationOptions {
  Device device = kCPU;
  DType dtype = DType::F32;  // activations, as EngineOptions::dtype
  int width = 0, height = 0, steps = 0;  // 0: the model's defaults
  float cfg = -1;                        // -1: the model's default
  uint64_t seed = 0;
};

// A prompts file: one prompt per line; blank lines and lines starting with '#' are skipped. Throws when the
// file cannot be read or holds no prompt.
std::vector<std::string> read_prompt_list(const std::string& path);

// Weight name as in the checkpoint ("layers.3.mlp.gate_proj.weight") -> max |input| over every prompt and
// step. `progress(done, total)` after each prompt. Throws on a NaN or infinite input (naming the weight).
std::map<std::string, float> calibrate_dit_inputs(const std::string& model, const std::vector<std::string>& prompts,
                                                  const CalibrationOptions& opt,
                                                  const std::function<void(int, int)>& progress = {});

}  // namespace ernie
