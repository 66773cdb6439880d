// Request defaults and validation, separate from the loaded weights so callers (the CLI, the server, the
// C API) can reject bad input before any weights are loaded or any compute runs.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "engine/image.h"
#include "engine/noise.h"
#include "engine/samplers/sampler_kind.h"
#include "io/model_folder.h"

namespace ernie {

// A LoRA for one request (engine/lora_library.h): a file in EngineOptions::lora_dir by name (prompt tags, the
// server), or a file path (the CLI's --lora, the C API). Engine::resolve fills the rest.
struct LoraRef {
  std::string name;     // the file's name in lora_dir without ".safetensors"; resolved: the file's stem
  std::string path;     // resolved: the file's canonical path
  float scale = 1;      // delta W = scale · (alpha / rank) · B·A; |scale| <= 16
  bool from_tag = false;  // read off a <lora:NAME:SCALE> tag of the prompt (resolve adds these each time)
  std::string hash;     // resolved: A1111's short hash (engine/lora_library.h)
  int skipped = 0;      // resolved: the file's text-encoder tensors, which are not applied (front ends warn)
  bool operator==(const LoraRef& o) const { return path == o.path && scale == o.scale; }  // the same weights
};

struct GenerateRequest {
  std::string prompt;
  std::string negative_prompt;  // default "" as the reference
  int width = 0, height = 0;    // 0 = model default (1024)
  int steps = 0;                // 0 = model default (50, Turbo 8)
  float cfg = -1;               // -1 = model default (4.0, Turbo 1.0); other negatives are rejected
  uint64_t seed = 0;
  bool seed_random = false;     // draw the seed in resolve_request (a "-1" seed); resolved: false, `seed` is the one drawn
  int num_images = 1;           // images per prompt (batch)
  bool use_pe = false;          // rewrite the prompt with the prompt enhancer first
  std::optional<Tensor> init_latents;  // [B, 4L, H/s, W/s] patchified initial noise (reproduce a run)
  // Tools (bench): the prompt as token ids, encoded instead of `prompt` (which is then only recorded); the
  // only prompt an engine with random weights (EngineOptions::random_weights, no tokenizer) takes.
  std::vector<int64_t> prompt_ids;
  SamplerKind sampler = SamplerKind::Euler;
  float shift = 0;              // 0 = the model's scheduler shift; else a fixed shift (> 0)
  NoiseRng rng = NoiseRng::Cpu; // the noise generator of `seed` (engine/noise.h)
  // Stacked adapters (their deltas add up). The prompt may carry <lora:NAME:SCALE> tags too: they stay in the
  // prompt (and its metadata) and are removed before encoding; resolved, this list holds both.
  std::vector<LoraRef> loras;
  // img2img and inpainting (engine/init_image.h). init_image is at the request's size, or any size with
  // `resize` (resolve then resizes it and the mask); an unset size follows it.
  std::optional<Image> init_image;
  float strength = -1;          // (0, 1]: how much of the schedule runs; -1: 0.75, or 1 with a mask; 1 = text-to-image
  std::optional<Image> mask;    // white (or transparent, in a mask with transparency) = repaint; init_image's size
  int mask_blur = 0;            // Gaussian sigma in pixels over the mask (0..256)
  bool composite = false;       // paste init_image's unmasked pixels back over the result (A1111's inpaint)
  bool resize = false;          // resize init_image to width x height instead of rejecting another size
  // Set by resolve_request: every default is filled, the seed drawn and the fields checked. resolve_request returns
  // such a request unchanged, so a request is resolved once however many layers it passes (front end, open's plan,
  // generate). Code that edits a resolved request keeps it valid (the CLI only adds its own seed's noise).
  bool resolved = false;
};

struct ModelLimits {
  int scale_factor = 16;        // pixels per DiT token (VaeConfig::scale_factor)
  int latent_channels = 128;    // DiT in_channels: patchified latent channels
  bool turbo = false;           // defaults: Turbo 8 steps / cfg 1, otherwise 50 steps / cfg 4
  int max_side = 4096;          // pixels per side
  int64_t max_pixels = int64_t(2048) * 4096;  // 8 MP per image
  int max_steps = 1000;
  int max_images = 64;
  float shift = 0;              // the scheduler's static shift; 0 when it shifts dynamically
};
ModelLimits model_limits(const ModelFolder& m);

int default_steps(bool turbo);   // 50, Turbo 8
float default_cfg(bool turbo);   // 4.0, Turbo 1.0
constexpr int kDefaultSize = 1024;
constexpr float kCfgDefault = -1.0f;  // GenerateRequest::cfg meaning "the model's default"

// The one place each decision about a request is made (every front end goes through resolve_request):
// - defaults by variant: default_steps, default_cfg (ModelLimits::turbo, from detection or --variant);
// - sizes: resolve_request (unset sides follow init_latents, then init_image, then kDefaultSize; check_side's rules);
// - the seed: draw_seed, which resolve_request calls (a seed_random request's seed, drawn once);
// - img2img's first step: first_step(resolved).
// Fills the defaults of `req` (an unset width or height follows init_latents when given) and validates it; throws Error with a message a user can act on.
// Checks init_latents' shape ([num_images, latent_channels, H/s, W/s]), dtype and values, and the img2img
// fields: sizes, strength (at least one step must run), mask.
GenerateRequest resolve_request(const GenerateRequest& req, const ModelLimits& lim);

// A seed as users write it (--seed, A1111, stable-diffusion.cpp): "-1" is random (nullopt), else a decimal
// from 0 to 2^64 - 1; anything else, or out of range, throws Error naming `flag`.
std::optional<uint64_t> parse_seed(const std::string& s, const char* flag = "--seed");

// The seed a "-1" (random) request runs with: 32 random bits, so it stays exact in JavaScript and every UI.
// resolve_request draws it for a seed_random request; the front ends record the resolved seed (PNG, JSON, the C
// API's results) as the seed used. (`enhance` draws its sampling seed here too.)
uint64_t random_seed();
// Fixes a seed_random request's seed now (resolve_request does; the shared queue does at submission, so the job
// records its seed before a worker resolves it).
void draw_seed(GenerateRequest& req);

// The first step of the schedule a resolved request runs (img2img starts late: engine/init_image.h), and the
// number it runs.
int first_step(const GenerateRequest& resolved);
int steps_run(const GenerateRequest& resolved);

// The size rules: the width and height a request runs at (an unset side follows init_latents, then init_image,
// then kDefaultSize), and the check of a size against the model (multiples of the scale factor, the limits).
std::pair<int, int> request_size(const GenerateRequest& req, const ModelLimits& lim);
void check_size(int width, int height, const ModelLimits& lim);

// [num_images, latent_channels, height/s, width/s] of a resolved request.
Shape latent_shape(const GenerateRequest& resolved, const ModelLimits& lim);

}  // namespace ernie
