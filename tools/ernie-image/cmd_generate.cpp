// ernie-image generate --model DIR -p PROMPT [-n NEGATIVE] [-W 1024 -H 1024] [--steps N] [--cfg S] [--seed N]
//   [--batch N] [-o out.png] [--init-latents F] [--save-latents F] [--quiet] [--progress auto|bar|plain|json|none] [--pe]
//   [-i IMAGE.png [--strength S] [--resize] [--mask MASK.png [--mask-blur PX] [--composite]]]
//   [engine flags]
// Parse flags -> Engine::open -> generate -> write PNGs. Everything a user can get wrong is checked before
// the weights are loaded (the output paths here, the rest by Engine::open).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "commands.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/metadata.h"
#include "engine/noise.h"
#include "progress.h"
#include "engine_flags.h"
#include "generate_util.h"
#include "engine/image_files.h"
#include "io/safetensors.h"

namespace ernie::cli {
namespace {

struct Opts {
  EngineOptions engine;
  std::string prompt, negative, out = "out.png", init_latents, save_latents, save_final_latents, progress = "auto",
      seed = "-1", sampler = "euler", rng = "cpu", init_img, mask;
  std::vector<std::string> loras;  // --lora FILE[:SCALE]
  float shift = 0, strength = -1;
  int width = 0, height = 0, steps = 0, batch = 1, mask_blur = 0, quality = kDefaultImageQuality;
  bool resize = false, composite = false;
  float cfg = kCfgDefault;
  bool quiet = false, verbose = false, pe = false;
};

int run(Opts& o, const CLI::App& c) {
  ProgressMode pmode = o.quiet ? ProgressMode::Quiet : parse_progress_mode(o.progress);
  const bool json = pmode == ProgressMode::Json;  // JSON lines only, on stdout; errors too (main)
  json_errors = json;
  std::optional<uint64_t> seed = parse_seed(o.seed);  // nullopt: random (-1, the default)
  const bool seed_given = seed.has_value();

  // 0 means "the model's default" inside a request; on the command line an explicit 0 is a mistake.
  if (c.count("--steps")) ERNIE_CHECK(o.steps >= 1, "steps ", std::to_string(o.steps), " must be at least 1");
  if (c.count("--width")) ERNIE_CHECK(o.width > 0, "width ", std::to_string(o.width), " must be positive");
  if (c.count("--height")) ERNIE_CHECK(o.height > 0, "height ", std::to_string(o.height), " must be positive");
  if (c.count("--vae-tile")) ERNIE_CHECK(o.engine.vae_tile > 0, "--vae-tile ", std::to_string(o.engine.vae_tile),
                                         " must be a positive number of pixels");

  GenerateRequest req;
  req.sampler = parse_sampler(o.sampler, "--sampler");
  req.rng = parse_rng(o.rng);
  if (c.count("--shift"))
    ERNIE_CHECK(std::isfinite(o.shift) && o.shift > 0, "--shift ", std::to_string(o.shift),
                " must be a positive number (the model's is 4)");
  req.shift = o.shift;
  req.prompt = o.prompt;
  req.negative_prompt = o.negative;
  req.width = o.width;
  req.height = o.height;
  req.steps = o.steps;
  req.cfg = o.cfg;
  req.num_images = o.batch;
  req.use_pe = o.pe;
  for (const std::string& l : o.loras) req.loras.push_back(parse_lora_flag(l));
  if (!o.init_img.empty()) req.init_image = load_image_flag(o.init_img, "--init-img");
  if (!o.mask.empty()) req.mask = load_image_flag(o.mask, "--mask");
  req.strength = o.strength;
  req.mask_blur = o.mask_blur;
  req.composite = o.composite;
  req.resize = o.resize;
  if (!o.init_latents.empty()) {
    InitLatents il = load_init_latents(o.init_latents);
    // An unset batch follows the file (and resolve_request's sizes do), so `--init-latents F` alone
    // reproduces a saved run. The noise comes from the file: the seed recorded is the one that drew it
    // (the file's, from --save-latents), never a --seed that did not.
    ERNIE_CHECK(!seed_given || !il.seed || *il.seed == *seed, "--seed ", o.seed, ": the noise of ", o.init_latents,
                " was drawn from seed ", std::to_string(il.seed.value_or(0)), "; leave --seed out");
    ERNIE_CHECK(!seed_given || il.seed, "--seed ", o.seed, ": the noise comes from ", o.init_latents,
                " (which records no seed), not from a seed; leave --seed out");
    if (c.count("--batch") == 0) req.num_images = int(il.latents.dim(0));
    seed = il.seed;
    req.init_latents = il.latents;
  }
  req.seed = seed.value_or(0);
  req.seed_random = !seed && !req.init_latents;  // resolve_request draws it

  // Output paths: PNG, JPEG or WebP, writable, one per image, none of the inputs, checked before anything is loaded.
  std::vector<std::string> inputs;
  for (const std::string* in : {&o.init_img, &o.mask, &o.init_latents})
    if (!in->empty()) inputs.push_back(*in);
  std::vector<std::string> outs = expand_output_paths(o.out, req.num_images);
  for (const std::string& p : outs) check_writable(p, {".png", ".jpg", ".jpeg", ".webp"}, inputs);
  if (!o.save_latents.empty()) check_writable(o.save_latents, {".safetensors"}, inputs);
  if (!o.save_final_latents.empty()) check_writable(o.save_final_latents, {".safetensors"}, inputs);

  o.engine.pe = o.pe ? PeLoad::Required : PeLoad::Off;
  o.engine.plan_for = req;
  ProgressPrinter printer(pmode, json ? stdout : stderr);
  const auto t_open = std::chrono::steady_clock::now();
  auto engine = Engine::open(o.engine, printer.fn());
  const double open_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_open).count();
  const OffloadChoice& oc = engine->info().memory;
  if (oc.limit_bytes && !o.quiet)
    printer.message("info", "--max-vram " + gib_str(oc.limit_bytes) + ": --offload " + offload_name(oc.mode) +
                                (oc.vae_tiling ? " with a tiled VAE decode" : "") + " (estimated peak " +
                                gib_str(oc.estimate_bytes) + ")");
  // Open resolved the request it planned for (its seed drawn); generate runs that one.
  GenerateRequest r = engine->resolve(engine->info().planned ? *engine->info().planned : req);
  if (req.seed_random) seed = r.seed;
  if (!o.negative.empty() && r.negative_prompt.empty() && !o.quiet) {
    char cfg[32];
    std::snprintf(cfg, sizeof cfg, "%g", double(r.cfg));
    printer.message("warning", std::string("the negative prompt is ignored at cfg ") + cfg +
                                   " (guidance off; it takes cfg > 1) and not recorded in the PNG");
  }
  for (const LoraRef& l : r.loras)
    if (l.skipped > 0 && !o.quiet)
      printer.message("warning", "LoRA " + l.name + ": its " + std::to_string(l.skipped) +
                                     " text-encoder tensors are not applied (this model's text encoder takes no LoRA)");
  if (o.verbose && !o.quiet) {
    const EngineInfo& in = engine->info();
    char line[512];
    std::snprintf(line, sizeof line,
                  "settings: model %s, device %s, dtype %s, offload %s, %dx%d, %d steps, cfg %g, sampler %s, "
                  "shift %g, %d image(s), seed %s, rng %s",
                  model_display_name(engine->model_dir()).c_str(), in.device.str().c_str(), dtype_name(in.dtype),
                  offload_name(in.memory.mode), r.width, r.height, r.steps, double(r.cfg), sampler_id(r.sampler),
                  double(r.shift), r.num_images, seed ? std::to_string(*seed).c_str() : "none (the noise file records none)",
                  rng_name(r.rng));
    printer.message("info", line);
    for (const LoraRef& l : r.loras)
      printer.message("info", "lora: " + l.name + " (" + l.path + ", hash " + l.hash + ") at scale " +
                                  std::to_string(l.scale) + (l.from_tag ? ", from a prompt tag" : ""));
  }
  if (!o.save_latents.empty() && !r.init_latents)
    r.init_latents = initial_noise(latent_shape(r, engine->limits()), r.seed, r.rng, engine->info().dtype,
                                   engine->info().device).to(kCPU);

  GenerateResult res = engine->generate(r, printer.fn());
  printer.finish();
  if (res.prompt_truncated && !o.quiet)
    printer.message("warning", "the prompt was cut to the tokenizer's limit of " +
                                   std::to_string(engine->max_prompt_tokens()) + " tokens");

  const std::string model_name = model_display_name(engine->model_dir());
  for (int b = 0; b < r.num_images; ++b) {
    const ImageMeta meta = image_meta(res, b, model_name, seed);
    const Image& img = res.images[size_t(b)];
    save_image(outs[size_t(b)], img, meta, o.quality, inputs);
  }
  if (!o.save_latents.empty()) {
    std::map<std::string, std::string> md = {{"format", "ernie-image latents"}};
    if (seed) md["seed"] = std::to_string(*seed);
    save_safetensors(o.save_latents, {{"latents", r.init_latents->to_f32()}}, md);
  }
  if (!o.save_final_latents.empty()) {  // the denoised latents before the VAE, in the --init-latents layout
    std::map<std::string, std::string> md = {{"format", "ernie-image final latents"},
                                             {"sampler", sampler_id(r.sampler)}, {"steps", std::to_string(r.steps)}};
    if (seed) md["seed"] = std::to_string(*seed);
    save_safetensors(o.save_final_latents, {{"latents", res.latents.to_f32()}}, md);
  }
  const int run_steps = steps_run(r);  // img2img: fewer
  if (json) {
    using oj = nlohmann::ordered_json;
    oj images = oj::array();
    for (int b = 0; b < r.num_images; ++b)
      images.push_back({{"path", outs[size_t(b)]}, {"seed", seed ? oj(image_seed(*seed, b, r.rng)) : oj()}});
    auto ms = [](double s) { return std::round(s * 1000) / 1000; };
    oj done = {{"event", "done"}, {"images", images},
               {"timings", {{"encode_s", ms(res.encode_s)}, {"denoise_s", ms(res.denoise_s)},
                            {"decode_s", ms(res.decode_s)}, {"vae_encode_s", ms(res.vae_encode_s)},
                            {"s_per_step", ms(res.denoise_s / run_steps)}}}};
    // Cold start (issue 42): the device context, and each component's load, at open or in this generate.
    const LoadTimes& a = engine->info().loads;
    const LoadTimes& b = res.loads;
    done["timings"]["open_s"] = ms(open_s);
    done["timings"]["cuda_init_s"] = ms(a.cuda_init_s);
    done["timings"]["load_s"] = {{"text_encoder", ms(a.text_encoder_s + b.text_encoder_s)},
                                 {"prompt_enhancer", ms(a.prompt_enhancer_s + b.prompt_enhancer_s)},
                                 {"denoiser", ms(a.denoiser_s + b.denoiser_s)}, {"vae", ms(a.vae_s + b.vae_s)}};
    if (r.use_pe) done["revised_prompt"] = res.revised_prompt;
    done["truncated"] = res.prompt_truncated;  // as the HTTP API's: the prompt was cut to the tokenizer's limit
    if (!res.parallel.empty()) done["parallel"] = res.parallel;  // the rows ran split over the --gpus
    printer.event(done);
  } else if (!o.quiet) {
    if (r.use_pe) std::fprintf(stderr, "revised prompt: %s\n", res.revised_prompt.c_str());
    for (const std::string& p : outs) std::printf("%s\n", p.c_str());
    if (req.seed_random) std::fprintf(stderr, "seed: %llu\n", (unsigned long long)*seed);
    if (r.init_image)
      std::fprintf(stderr, "img2img: strength %g runs %d of %d steps; image encode %.2fs\n", double(r.strength),
                   run_steps, r.steps, res.vae_encode_s);
    std::fprintf(stderr, "encode %.2fs, denoise %.2fs (%.2f s/step), decode %.2fs\n", res.encode_s, res.denoise_s,
                 res.denoise_s / run_steps, res.decode_s);
    if (!res.parallel.empty())
      std::fprintf(stderr, "parallel: %s (the two guidance rows on two ranks)\n", res.parallel.c_str());
    else if (o.engine.parallel == "cfg")
      std::fprintf(stderr, "note: --parallel cfg: cfg %g has one row, which ran on the first GPU alone\n", double(r.cfg));
  }
  return 0;
}

Register reg(10, [](CLI::App& app) {
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("generate", "Generate images from a prompt and write PNGs with the parameters embedded");
  add_model_flag(*c, o->engine);
  c->add_option("--prompt,-p", o->prompt, "the prompt")->required();
  c->add_option("--negative,-n,--negative-prompt", o->negative, "negative prompt (default \"\"; used when cfg > 1)");
  c->add_option("--width,-W", o->width, "width in pixels, a multiple of the model's scale factor (default 1024)");
  c->add_option("--height,-H", o->height, "height in pixels (default 1024)");
  c->add_option("--steps", o->steps, "denoising steps (default: 50, Turbo 8)");
  c->add_option("--cfg,--cfg-scale", o->cfg, "guidance scale; 1 turns guidance off (default: 4, Turbo 1)");
  c->add_option("--seed,-s", o->seed, "seed of the initial noise: -1 (default) is random; the batch is one draw "
                                     "(with --rng ernie, image i uses seed + i)");
  c->add_option("--sampler,--sampling-method", o->sampler, std::string("sampler: ") + kSamplerChoices +
                                                               " (default euler)");
  c->add_option("--shift,--flow-shift", o->shift, "scheduler shift, a positive number (default: the model's, 4)");
  c->add_option("--rng", o->rng, "noise generator: cpu (torch's CPU generator, default), cuda (torch's CUDA "
                                 "generator, computed on the host) or ernie");
  c->add_option("--batch,-b,--batch-count", o->batch, "images to generate (default 1)");
  c->add_option("--output,-o", o->out, "output image: PNG, or JPEG (.jpg, .jpeg) or WebP (.webp) by the "
                                   "extension; %d (or %03d) is replaced by the image index (default out.png)");
  c->add_option("--quality", o->quality, "JPEG and WebP quality, 1-100 (default 90)")->check(CLI::Range(1, 100));
  c->add_option("--init-latents", o->init_latents, "safetensors file with tensor `latents` [B, C, H/s, W/s]: the initial noise");
  c->add_option("--save-latents", o->save_latents, "write the initial noise (tensor `latents`) to this safetensors file");
  c->add_option("--save-final-latents", o->save_final_latents, "write the denoised latents before the VAE (tensor "
                                                               "`latents`, the --init-latents layout) to this file");
  c->add_flag("--quiet,-q", o->quiet, "print nothing but errors");
  c->add_flag("--verbose,-v", o->verbose, "also print the resolved settings (device, dtype, offload, size, steps, "
                                          "cfg, seed) before generating");
  c->add_option("--progress", o->progress, "auto (default: bar on a terminal, else plain lines), bar, plain, json "
                                         "(JSON lines only, on stdout) or none");
  c->add_option("--lora", o->loras, "a LoRA file to apply, FILE or FILE:SCALE (default scale 1); repeat to stack "
                                   "adapters (their deltas add up)");
  c->add_option("--lora-dir,--lora-model-dir", o->engine.lora_dir,
                "folder of LoRA .safetensors files that prompt tags <lora:NAME:SCALE> name (tags are removed from "
                "the prompt before encoding and kept in the PNG metadata)");
  c->add_flag("--pe", o->pe, "rewrite the prompt with the model's prompt enhancer first");
  c->add_option("--init-img,-i", o->init_img, "img2img: start from this PNG, JPEG or WebP (VAE-encoded, then noised to --strength); "
                                             "the size follows it unless -W/-H are given");
  c->add_option("--strength", o->strength, "img2img: how much of the schedule runs, (0, 1]; 1 ignores the image "
                                          "outside a mask (default 0.75, with --mask 1)");
  c->add_flag("--resize", o->resize, "img2img: resize the init image (and mask) to -W x -H (Lanczos) instead of "
                                     "rejecting another size");
  c->add_option("--mask", o->mask, "inpainting: an image (PNG, JPEG, WebP) of the init image's size; white repaints, black keeps (in a mask "
                                  "with transparency, transparent repaints, as OpenAI's edits)");
  c->add_option("--mask-blur", o->mask_blur, "inpainting: blur the mask by this many pixels (a Gaussian's sigma; "
                                            "default 0)");
  c->add_flag("--composite", o->composite, "inpainting: paste the init image's unmasked pixels back over the result "
                                           "(softened by --mask-blur)");
  add_engine_flags(*c, o->engine);
  return std::function<int()>([o, c] { return run(*o, *c); });
});

}  // namespace
}  // namespace ernie::cli
