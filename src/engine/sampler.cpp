#include "engine/sampler.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "ops/collectives/communicator.h"
#include "ops/ops.h"

namespace ernie {

TextBatch pad_text(const std::vector<Tensor>& hiddens, Device device, DType act, int64_t min_len) {
  ERNIE_CHECK(!hiddens.empty(), "pad_text: no text");
  const int64_t C = hiddens[0].dim(-1);
  int64_t tmax = min_len;
  for (const Tensor& h : hiddens) {
    ERNIE_CHECK(h.ndim() == 2 && h.dim(1) == C && h.dim(0) >= 1, "pad_text: text hidden states ", shape_str(h.shape()),
                " are not [T, ", std::to_string(C), "]");
    tmax = std::max(tmax, h.dim(0));
  }
  const int64_t B = int64_t(hiddens.size());
  Tensor host = Tensor::zeros({B, tmax, C}, DType::F32);
  TextBatch tb;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<float> v = hiddens[size_t(b)].to_vector();
    std::memcpy(host.f32() + b * tmax * C, v.data(), v.size() * sizeof(float));
    tb.text_lens.push_back(hiddens[size_t(b)].dim(0));
  }
  Tensor t = host.to(device);
  tb.text_bth = act == DType::F32 ? t : ops::cast(t, act);
  return tb;
}

Tensor sample_cfg(const ErnieDit& dit, FlowSolver& solver, Device device, DType act, const SamplerInput& in,
                  const std::function<void(int, const Tensor&)>& on_step, const std::atomic<bool>* cancel,
                  Communicator* cfg_split, Communicator* seq_split) {
  const int N = solver.num_steps();
  ERNIE_CHECK(N >= 1, "sampler: the solver has no timesteps");
  const int64_t B = in.latents.dim(0);
  ERNIE_CHECK(int64_t(in.cond.size()) == B, "sampler: ", std::to_string(in.cond.size()), " prompts for ",
              std::to_string(B), " latents");
  const bool do_cfg = in.cfg > 1.0f;  // the reference's do_classifier_free_guidance
  ERNIE_CHECK(!do_cfg || int64_t(in.uncond.size()) == B, "sampler: cfg needs one negative embedding per image");

  std::vector<Tensor> rows;
  if (do_cfg) rows.insert(rows.end(), in.uncond.begin(), in.uncond.end());
  rows.insert(rows.end(), in.cond.begin(), in.cond.end());
  // CFG-parallel: this rank's half of the rows, padded as all of them are.
  const bool split = cfg_split != nullptr;
  ERNIE_CHECK(!split || (do_cfg && cfg_split->size() == 2), "sampler: the CFG split needs cfg > 1 and 2 ranks (cfg ",
              std::to_string(in.cfg), ", ", std::to_string(split ? cfg_split->size() : 0), " ranks)");
  ERNIE_CHECK(!split || cfg_split->device() == device, "sampler: rank on ", split ? cfg_split->device().str() : "",
              ", the DiT's device is ", device.str());
  ERNIE_CHECK(!split || !seq_split, "sampler: the CFG split and the sequence split do not combine");
  int64_t tmax = 0;
  for (const Tensor& r : rows) tmax = std::max(tmax, r.dim(0));
  if (split) rows = cfg_split->rank() == 0 ? in.uncond : in.cond;
  const TextBatch text = pad_text(rows, device, act, tmax);

  auto f32_on_device = [&](const Tensor& t) {
    Tensor d = t.to(device);
    return d.dtype() == DType::F32 ? d : ops::cast(d, DType::F32);
  };
  ERNIE_CHECK(in.first_step >= 0 && in.first_step < N, "sampler: first step ", std::to_string(in.first_step),
              " of ", std::to_string(N));
  ERNIE_CHECK(!in.mask.defined() || in.x0.defined(), "sampler: a mask needs x0");
  for (const Tensor* t : {&in.x0, &in.mask})
    ERNIE_CHECK(!t->defined() || t->shape() == in.latents.shape(), "sampler: x0/mask ", shape_str(t->shape()),
                " differs from the latents ", shape_str(in.latents.shape()));
  const Tensor noise = f32_on_device(in.latents);
  Tensor latents = noise, x0, mask, keep;
  // scale_noise: sigma * noise + (1 - sigma) * x0
  auto noised_x0 = [&](int i) { return lincomb({{solver.sigmas()[size_t(i)], noise}, {1.0 - solver.sigmas()[size_t(i)], x0}}); };
  if (in.x0.defined()) {
    x0 = f32_on_device(in.x0);
    latents = noised_x0(in.first_step);
  }
  if (in.mask.defined()) {
    std::vector<float> m = in.mask.to_vector();
    for (float& v : m) v = 1.0f - v;
    mask = f32_on_device(in.mask);
    keep = f32_on_device(Tensor::from_vector(m, in.mask.shape()));  // 1 - m
  }

  for (int i = in.first_step; i < N; ++i) {
    if (cancel && cancel->load()) throw Cancelled();
    Tensor x = act == DType::F32 ? latents : ops::cast(latents, act);
    Tensor model_input = do_cfg && !split ? ops::concat({x, x}, 0) : x;
    // t_batch = full((rows,), t, dtype=transformer.dtype): bf16 rounds 994.92 to 996.
    std::vector<float> t_batch(size_t(model_input.dim(0)),
                               dit_timestep(solver.timesteps()[size_t(i)], in.round_timesteps ? act : DType::F32));

    Tensor pred = seq_split ? dit.forward_seq_parallel(*seq_split, model_input, t_batch, text.text_bth, text.text_lens)
                            : dit.forward(model_input, t_batch, text.text_bth, text.text_lens);
    if (pred.dtype() != DType::F32) pred = ops::cast(pred, DType::F32);
    if (split) {  // every rank gets [uncond..., cond...] as one device computes it
      Shape all = pred.shape();
      all[0] *= 2;
      Tensor both = Tensor::empty(all, DType::F32, device);
      cfg_split->all_gather(pred, both);
      pred = both;
    }
    if (do_cfg) {
      Tensor pred_uncond = pred.narrow(0, B), pred_cond = pred.narrow(B, B);
      // pred_uncond + guidance_scale * (pred_cond - pred_uncond)
      pred = ops::add(pred_uncond, ops::scale(ops::add(pred_cond, ops::scale(pred_uncond, -1.0f)), in.cfg));
    }
    latents = solver.step(latents, pred, i);  // Euler: sample + (sigma[i+1] - sigma[i]) * pred
    if (mask.defined())  // (1 - m) * init_latents_proper + m * latents
      latents = ops::add(ops::mul(keep, i + 1 < N ? noised_x0(i + 1) : x0), ops::mul(mask, latents));
    if (on_step) on_step(i + 1 - in.first_step, latents);
  }
  return latents;
}

}  // namespace ernie
