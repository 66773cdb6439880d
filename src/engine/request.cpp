#include "engine/request.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>

#include "core/error.h"
#include "engine/init_image.h"
#include "text/unicode.h"

namespace ernie {

ModelLimits model_limits(const ModelFolder& m) {
  ModelLimits l;
  l.scale_factor = m.vae.scale_factor();
  l.latent_channels = m.dit.in_channels;
  l.turbo = m.turbo;
  l.shift = m.scheduler.use_dynamic_shifting ? 0.0f : m.scheduler.shift;
  return l;
}

int default_steps(bool turbo) { return turbo ? 8 : 50; }
float default_cfg(bool turbo) { return turbo ? 1.0f : 4.0f; }

namespace {
using std::to_string;

void check_side(const char* what, int v, const ModelLimits& l) {
  ERNIE_CHECK(v > 0, what, " ", to_string(v), " must be positive");
  ERNIE_CHECK(v % l.scale_factor == 0, what, " ", to_string(v), " is not a multiple of ", to_string(l.scale_factor),
              " (this model's VAE scale factor); try ", to_string(std::max(1, v / l.scale_factor) * l.scale_factor));
  ERNIE_CHECK(v <= l.max_side, what, " ", to_string(v), " is beyond this engine's limit of ", to_string(l.max_side),
              " pixels per side");
}
// The img2img fields, after the size is settled: defaults, ranges, sizes (resizing when asked).
void resolve_init_image(GenerateRequest& r) {
  if (!r.init_image) {
    ERNIE_CHECK(!r.mask, "a mask needs an init image (the image to inpaint)");
    ERNIE_CHECK(r.strength == -1 || r.strength == 1, "strength ", to_string(r.strength),
                " needs an init image (img2img); text-to-image runs the whole schedule");
    ERNIE_CHECK(!r.resize, "resize needs an init image");
    return;
  }
  if (r.strength == -1) r.strength = r.mask ? kDefaultInpaintStrength : kDefaultStrength;
  ERNIE_CHECK(std::isfinite(r.strength) && r.strength > 0 && r.strength <= 1, "strength ", to_string(r.strength),
              " must be in (0, 1] (1: the image is only a guide for the mask, or ignored without one)");
  const int t_start = first_step(r);
  ERNIE_CHECK(t_start < r.steps, "strength ", to_string(r.strength), " with ", to_string(r.steps),
              " steps runs no step (it starts at step ", to_string(t_start), "); raise the steps or the strength");
  const Image& im = *r.init_image;
  if (r.mask)
    ERNIE_CHECK(r.mask->width == im.width && r.mask->height == im.height, "mask: ", to_string(r.mask->width), "x",
                to_string(r.mask->height), " differs from the init image's ", to_string(im.width), "x",
                to_string(im.height));
  ERNIE_CHECK(r.mask_blur >= 0 && r.mask_blur <= kMaxMaskBlur, "mask blur ", to_string(r.mask_blur),
              " is out of range [0, ", to_string(kMaxMaskBlur), "] pixels");
  ERNIE_CHECK(r.mask || (r.mask_blur == 0 && !r.composite), "mask blur and composite need a mask");
  // The source may be larger than any output (it is only read), within 4x the pixels of the largest.
  constexpr int64_t kMaxSourcePixels = int64_t(4) * 2048 * 4096;
  ERNIE_CHECK(int64_t(im.width) * im.height <= kMaxSourcePixels, "init image: ", to_string(im.width), "x",
              to_string(im.height), " is too large (at most ", to_string(kMaxSourcePixels), " pixels)");
  if (im.width == r.width && im.height == r.height) return;
  ERNIE_CHECK(r.resize, "init image: ", to_string(im.width), "x", to_string(im.height), " differs from the requested ",
              to_string(r.width), "x", to_string(r.height), "; resize it (--resize, \"resize\": true) or ask for its size");
  r.init_image = resize_image(im, r.width, r.height);
  if (r.mask) r.mask = resize_image(*r.mask, r.width, r.height);
}

}  // namespace

Shape latent_shape(const GenerateRequest& r, const ModelLimits& l) {
  return {r.num_images, l.latent_channels, r.height / l.scale_factor, r.width / l.scale_factor};
}

std::optional<uint64_t> parse_seed(const std::string& s, const char* flag) {
  if (s == "-1") return std::nullopt;
  ERNIE_CHECK(!s.empty() && s.size() <= 20 && s.find_first_not_of("0123456789") == std::string::npos, flag, " '", s,
              "': a seed is -1 (random) or an integer from 0 to 18446744073709551615");
  uint64_t v = 0;
  for (char c : s) {
    const uint64_t d = uint64_t(c - '0');
    ERNIE_CHECK(v <= (UINT64_MAX - d) / 10, flag, " ", s, " is out of range (at most 18446744073709551615)");
    v = v * 10 + d;
  }
  return v;
}

uint64_t random_seed() {
  thread_local std::mt19937_64 rng{(uint64_t(std::random_device{}()) << 32) ^ std::random_device{}()};
  return rng() & 0xffffffffull;
}

void draw_seed(GenerateRequest& r) {
  if (r.seed_random) r.seed = random_seed();
  r.seed_random = false;
}

int first_step(const GenerateRequest& r) { return r.init_image ? img2img_start_step(r.steps, r.strength) : 0; }
int steps_run(const GenerateRequest& r) { return r.steps - first_step(r); }

std::pair<int, int> request_size(const GenerateRequest& r, const ModelLimits& l) {
  // Unset sides follow the initial noise, so its file alone reproduces a run; then the init image; else the default.
  const bool sized_latents = r.init_latents && r.init_latents->ndim() == 4;
  auto side = [&](int axis) {  // capped past any valid side, for check_size's message
    return int(std::min<int64_t>(r.init_latents->dim(axis) * l.scale_factor, int64_t(l.max_side) + 1));
  };
  const bool sized_image = r.init_image && !sized_latents;
  const int w = r.width != 0 ? r.width : sized_latents ? side(3) : sized_image ? r.init_image->width : kDefaultSize;
  const int h = r.height != 0 ? r.height : sized_latents ? side(2) : sized_image ? r.init_image->height : kDefaultSize;
  return {w, h};
}

void check_size(int width, int height, const ModelLimits& l) {
  check_side("width", width, l);
  check_side("height", height, l);
  const int64_t px = int64_t(width) * height;
  ERNIE_CHECK(px <= l.max_pixels, "size ", to_string(width), "x", to_string(height), " (", to_string(px),
              " pixels) is beyond this engine's limit of ", to_string(l.max_pixels), " pixels per image");
}

GenerateRequest resolve_request(const GenerateRequest& req, const ModelLimits& l) {
  if (req.resolved) return req;
  GenerateRequest r = req;
  if (r.init_image) check_image(*r.init_image, "init image");
  if (r.mask) check_image(*r.mask, "mask");
  std::tie(r.width, r.height) = request_size(r, l);
  if (r.steps == 0) r.steps = default_steps(l.turbo);
  if (r.cfg == kCfgDefault) r.cfg = default_cfg(l.turbo);
  if (r.cfg <= 1.0f) r.negative_prompt.clear();  // guidance off: no negative row drives the image, none is recorded
  ERNIE_CHECK(std::isfinite(r.shift) && r.shift >= 0, "shift ", to_string(r.shift),
              " must be a positive number (0: the model's)");
  if (r.shift == 0) r.shift = l.shift;  // recorded as used; stays 0 for a dynamic shift

  check_size(r.width, r.height, l);
  ERNIE_CHECK(r.steps >= 1, "steps ", to_string(r.steps), " must be at least 1");
  ERNIE_CHECK(r.steps <= l.max_steps, "steps ", to_string(r.steps), " is beyond the limit of ", to_string(l.max_steps));
  ERNIE_CHECK(std::isfinite(r.cfg), "cfg must be a finite number");
  ERNIE_CHECK(r.cfg >= 0, "cfg ", to_string(r.cfg), " must not be negative (use 1 to turn guidance off)");
  ERNIE_CHECK(r.num_images >= 1 && r.num_images <= l.max_images, "number of images ", to_string(r.num_images),
              " must be between 1 and ", to_string(l.max_images));
  for (auto [what, text] : {std::pair<const char*, const std::string*>{"prompt", &r.prompt},
                             {"negative prompt", &r.negative_prompt}}) {
    size_t bad = text::utf8_invalid_at(*text);
    ERNIE_CHECK(bad == std::string::npos, what, " is not valid UTF-8 (byte ", std::to_string(bad), ")");
    ERNIE_CHECK(text->find('\0') == std::string::npos, what, " contains a NUL character");
  }

  resolve_init_image(r);
  if (r.init_latents) {
    const Tensor& t = *r.init_latents;
    Shape want = latent_shape(r, l);
    ERNIE_CHECK(t.defined(), "init latents: empty tensor");
    ERNIE_CHECK(t.shape() == want, "init latents: shape ", shape_str(t.shape()), " does not match ", shape_str(want),
                " ([images, channels, height/", to_string(l.scale_factor), ", width/", to_string(l.scale_factor),
                "] for ", to_string(r.num_images), " image(s) of ", to_string(r.width), "x", to_string(r.height), ")");
    ERNIE_CHECK(dtype_is_float(t.dtype()), "init latents: dtype ", dtype_name(t.dtype()), " is not a float type");
    for (float v : t.to_vector())
      ERNIE_CHECK(std::isfinite(v), "init latents: contains a non-finite value");
  }
  draw_seed(r);  // last: a request that fails draws none
  r.resolved = true;
  return r;
}

}  // namespace ernie
