// The denoising samplers a request can pick (--sampler), their names as users write them, and the names
// A1111-style metadata gives them.
#pragma once
#include <string>

namespace ernie {

enum class SamplerKind {
  Euler,    // FlowMatchEulerDiscreteScheduler, the model's own (default)
  DpmPP2M,  // DPMSolverMultistepScheduler: dpmsolver++, order 2, midpoint, lower_order_final, flow sigmas
  UniPC,    // UniPCMultistepScheduler: bh2, order 2, predict_x0, flow sigmas
};

// "euler", "dpmpp_2m" or "unipc"; also stable-diffusion.cpp's "dpm++2m", ComfyUI's "uni_pc" and the A1111
// names ("DPM++ 2M", "UniPC"), case-insensitively. Anything else throws Error naming `flag` and the choices.
SamplerKind parse_sampler(const std::string& name, const char* flag = "--sampler");
const char* sampler_id(SamplerKind k);     // "euler", "dpmpp_2m", "unipc"
const char* sampler_a1111(SamplerKind k);  // "Euler", "DPM++ 2M", "UniPC"
constexpr const char* kSamplerChoices = "euler, dpmpp_2m (dpm++2m), unipc";

}  // namespace ernie
