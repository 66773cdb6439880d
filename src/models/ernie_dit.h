// ErnieImageTransformer2DModel: the 8B single-stream DiT with shared AdaLN. Reads like diffusers'
// transformer_ernie_image.py (names follow it), written against the op set.
#pragma once
#include <vector>

#include "io/model_folder.h"

namespace ernie {

class ErnieDit {
 public:
  static ErnieDit load(const ModelFolder& m, Device device, DType act);
  const DitConfig& config() const { return cfg_; }
  // hidden_states [B, C, H, W] (patchified latents), timestep [B] (sigma*1000 as the reference passes it),
  // text_bth [B, Tmax, text_in_dim] zero-padded, text_lens[B] <= Tmax. Returns [B, C_out, H, W].
  Tensor forward(const Tensor& hidden_states, const std::vector<float>& timestep, const Tensor& text_bth,
                 const std::vector<int64_t>& text_lens) const;

  struct Block {
    Tensor adaLN_sa_ln, adaLN_mlp_ln;
    Tensor to_q, to_k, to_v, to_out, norm_q, norm_k;
    Tensor gate_proj, up_proj, linear_fc2;
  };

 private:
  DitConfig cfg_;
  Device device_;
  DType act_ = DType::F32;
  Tensor x_embedder_w, x_embedder_b, text_proj, time_linear_1_w, time_linear_1_b, time_linear_2_w, time_linear_2_b;
  Tensor adaLN_modulation_w, adaLN_modulation_b, final_norm_w, final_norm_b, final_linear_w, final_linear_b;
  std::vector<Block> layers_;
};

}  // namespace ernie
