// The denoising loop of ErnieImagePipeline.__call__: a flow solver's steps (FlowMatch Euler, the model's own,
// or a multistep solver, engine/samplers/) over the DiT's velocity prediction with classifier-free guidance,
// the negative prompt as extra batch rows [uncond..., cond...].
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/tensor.h"
#include "models/ernie_dit.h"
#include "engine/samplers/flow_solver.h"
#include "engine/scheduler.h"

namespace ernie {

// _pad_text: text hidden states [T_i, C] (any device, float) zero-padded into one [B, Tmax, C] tensor on
// `device` in `act`, with the per-row lengths; Tmax is at least `min_len` (a CFG-parallel rank pads its rows
// to the length of all rows, so its DiT input is exactly its rows of the single-device input).
struct TextBatch {
  Tensor text_bth;
  std::vector<int64_t> text_lens;
};
TextBatch pad_text(const std::vector<Tensor>& hiddens, Device device, DType act, int64_t min_len = 0);

class Communicator;

struct SamplerInput {
  Tensor latents;                 // [B, C, h, w] initial noise, any float dtype/device
  std::vector<Tensor> cond;       // B text embeddings [T_i, C_text]
  std::vector<Tensor> uncond;     // B negative embeddings; used only when cfg > 1
  float cfg = 1;
  // Round the timestep fed to the DiT to the activation dtype, as the reference does in bf16
  // (994.92 -> 996). Off only to compare a bf16 run against fp32 golden data.
  bool round_timesteps = true;
  // img2img (engine/init_image.h): `latents` is then the noise; the solver's steps run from first_step on,
  // from s * noise + (1 - s) * x0 with s = sigmas[first_step]. With a mask (1 = repaint) every step ends
  // with x = (1 - m) * (s_next * noise + (1 - s_next) * x0) + m * x, and x0 itself outside after the last.
  int first_step = 0;
  Tensor x0;    // [B, C, h, w], any float dtype/device; undefined: text-to-image
  Tensor mask;  // [B, C, h, w] of 0/1; undefined: no inpainting
};

// Runs the solver's steps (from in.first_step) and returns the final latents [B, C, h, w] F32 on the DiT's device. The latents
// stay F32 between steps (the reference keeps them in the model dtype). `on_step(k, latents)` is called after the k-th
// step run (1-based) with the latents after it (on the device, valid during the call); `cancel` is polled before
// every step (throws Cancelled).
// CFG-parallel (engine/parallel/, --parallel cfg): with `cfg_split` (2 ranks) and cfg > 1, this rank runs only its
// rows through its `dit` on `device` (rank 0 the unconditional, rank 1 the conditional ones), the ranks all-gather
// the velocities into [uncond..., cond...], and every rank then runs the guidance and the solver's step
// identically: each returns the same latents the single-device loop does. Each rank passes its own solver.
// Ulysses (--parallel ulysses): with `seq_split`, every rank runs every row, each DiT forward split over the ranks'
// tokens (ErnieDit::forward_seq_parallel), and every rank gets the whole velocity.
Tensor sample_cfg(const ErnieDit& dit, FlowSolver& solver, Device device, DType act, const SamplerInput& in,
                  const std::function<void(int, const Tensor&)>& on_step = {}, const std::atomic<bool>* cancel = nullptr,
                  Communicator* cfg_split = nullptr, Communicator* seq_split = nullptr);

}  // namespace ernie
