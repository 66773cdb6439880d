// ernie-image generate --model DIR -p PROMPT [-n NEGATIVE] [-W 1024 -H 1024] [--steps N] [--cfg S] [--seed N]
//   [--batch N] [-o out.png] [--device cpu|cuda[:i]] [--dtype f32|bf16] [--quantize fp8|int8] [--threads N] [--init-latents F]
//   [--save-latents F] [--quiet] [--progress bar|json] [--pe] [--offload none|text-encoder|blocks] [--max-vram GiB]
//   [--vae-tiling] [--vae-tile PIXELS]
// Everything a user can get wrong is checked before the weights are loaded.
#include <algorithm>
#include <cstdio>
#include <random>

#include "commands.h"
#include "core/error.h"
#include "generate_util.h"
#include "io/model_folder.h"
#include "io/model_tokenizer.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "pipeline/metadata.h"
#include "pipeline/noise.h"
#include "pipeline/offload_plan.h"
#include "pipeline/pipeline.h"
#include "pipeline/progress.h"
#include "pipeline/request.h"

namespace ernie::cli {
namespace {

struct Opts {
  std::string model, prompt, negative, out = "out.png", device = "cpu", dtype, quantize, attention, init_latents, save_latents;
  std::string progress = "bar", offload;
  double max_vram = 0;
  int width = 0, height = 0, steps = 0, batch = 1, threads = 0, vae_tile = 0;
  float cfg = kCfgDefault;
  uint64_t seed = 0;
  bool quiet = false, pe = false, vae_tiling = false;
};

int run(const Opts& o, const CLI::App& c) {
  const bool seed_given = c.count("--seed") > 0;
  ProgressMode pmode = o.quiet ? ProgressMode::Quiet : parse_progress_mode(o.progress);

  PipelineOptions popt;
  popt.model_dir = o.model;
  popt.device = Device::parse(o.device);
  popt.dtype = parse_dtype_option(o.dtype, popt.device);
  popt.quantize = parse_quantize_option(o.quantize);
  popt.attention_fp8 = parse_attention_option(o.attention);
  popt.threads = o.threads;
  popt.load_pe = o.pe;
  ERNIE_CHECK(o.threads >= 0, "--threads ", std::to_string(o.threads), " must not be negative");
  MemoryFlags mem;
  if (c.count("--offload")) mem.offload = o.offload;
  if (c.count("--max-vram")) mem.max_vram_gib = o.max_vram;
  check_memory_flags(mem, popt.device);
  if (o.vae_tiling) popt.vae_tiling = VaeTilingMode::On;
  popt.vae_tile = o.vae_tile;

  // Model files: configs, checkpoint headers and tensor shapes, before anything is loaded.
  ModelFolder folder = ModelFolder::open(o.model, o.pe);
  for (const char* comp : {"transformer", "text_encoder", "vae"}) folder.require_ok(comp);
  if (o.pe) {
    ERNIE_CHECK(folder.pe_c.has_value(), o.model, ": --pe needs a prompt enhancer (pe/ folder), this model has none");
    folder.require_ok("pe");
  }
  const ModelLimits limits = model_limits(folder);
  if (c.count("--vae-tile")) {
    const int vs = folder.vae.spatial_scale();
    ERNIE_CHECK(o.vae_tile >= vs && o.vae_tile % vs == 0, "--vae-tile ", std::to_string(o.vae_tile),
                " must be a positive multiple of the VAE's ", std::to_string(vs), " pixels per latent pixel");
  }

  // 0 means "the model's default" inside a request; on the command line an explicit 0 is a mistake.
  if (c.count("--steps")) ERNIE_CHECK(o.steps >= 1, "steps ", std::to_string(o.steps), " must be at least 1");
  if (c.count("--width")) ERNIE_CHECK(o.width > 0, "width ", std::to_string(o.width), " must be positive");
  if (c.count("--height")) ERNIE_CHECK(o.height > 0, "height ", std::to_string(o.height), " must be positive");

  GenerateRequest req;
  req.prompt = o.prompt;
  req.negative_prompt = o.negative;
  req.width = o.width;
  req.height = o.height;
  req.steps = o.steps;
  req.cfg = o.cfg;
  req.num_images = o.batch;
  req.use_pe = o.pe;
  std::optional<uint64_t> seed;
  if (seed_given) seed = o.seed;

  if (!o.init_latents.empty()) {
    InitLatents il = load_init_latents(o.init_latents);
    const Tensor& t = il.latents;
    // Unset sizes and batch follow the file, so `--init-latents F` alone reproduces a saved run.
    if (t.ndim() == 4) {
      if (req.width == 0) req.width = int(t.dim(3)) * limits.scale_factor;
      if (req.height == 0) req.height = int(t.dim(2)) * limits.scale_factor;
      if (c.count("--batch") == 0) req.num_images = int(t.dim(0));
    }
    if (!seed && il.seed) seed = il.seed;
    req.init_latents = t;
  } else if (!seed) {
    seed = std::random_device{}();  // 32 random bits
  }
  req.seed = seed.value_or(0);
  GenerateRequest r = resolve_request(req, limits);

  // Output paths: PNG only, writable, one per image, checked before generating.
  std::vector<std::string> outs = expand_output_paths(o.out, r.num_images);
  for (const std::string& p : outs) check_writable(p, ".png");
  if (!o.save_latents.empty()) check_writable(o.save_latents, ".safetensors");

  if (!o.save_latents.empty() && !r.init_latents) r.init_latents = initial_noise(latent_shape(r, limits), r.seed);

  // Low-VRAM mode: as given, or the least offloading that fits --max-vram.
  int prompt_tokens = 0;
  if (popt.device.is_cuda() && mem.max_vram_gib) {
    Tokenizer tok = load_model_tokenizer(folder, "tokenizer");
    prompt_tokens = int(std::max(tok.encode(r.prompt).size(), tok.encode(r.negative_prompt).size()));
  }
  const OffloadChoice oc = plan_pipeline_memory(folder, request_shape(r, popt.dtype, prompt_tokens, popt.vae_tiling),
                                                mem, Offload::TextEncoder, popt);
  if (!o.quiet && oc.limit_bytes)
    std::fprintf(stderr, "--max-vram %s: --offload %s%s (estimated peak %s)\n", gib_str(oc.limit_bytes).c_str(),
                 offload_name(oc.mode), oc.vae_tiling ? " with a tiled VAE decode" : "",
                 gib_str(oc.estimate_bytes).c_str());

  ProgressPrinter printer(pmode);
  auto pipe = Pipeline::load(popt, printer.fn());
  GenerateResult res = pipe->generate(r, printer.fn());
  printer.finish();

  const std::string model_name = model_display_name(folder.root);
  for (int b = 0; b < r.num_images; ++b) {
    ImageMeta meta{res.resolved, res.revised_prompt, model_name, seed ? std::optional<uint64_t>(*seed + b) : std::nullopt,
                   b, r.num_images, res.vae_tiled, res.dit_weights, res.attention_fp8};
    const Image& img = res.images[size_t(b)];
    write_png(outs[size_t(b)], img.width, img.height, img.rgb, png_metadata(meta));
  }
  if (!o.save_latents.empty()) {
    std::map<std::string, std::string> md = {{"format", "ernie-image latents"}};
    if (seed) md["seed"] = std::to_string(*seed);
    save_safetensors(o.save_latents, {{"latents", r.init_latents->to_f32()}}, md);
  }
  if (!o.quiet) {
    if (r.use_pe) std::fprintf(stderr, "revised prompt: %s\n", res.revised_prompt.c_str());
    for (const std::string& p : outs) std::printf("%s\n", p.c_str());
    if (!seed_given && seed && o.init_latents.empty()) std::fprintf(stderr, "seed: %llu\n", (unsigned long long)*seed);
    std::fprintf(stderr, "encode %.2fs, denoise %.2fs (%.2f s/step), decode %.2fs\n", res.encode_s, res.denoise_s,
                 res.denoise_s / r.steps, res.decode_s);
  }
  return 0;
}

Register reg(10, [](CLI::App& app) {
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("generate", "Generate images from a prompt and write PNGs with the parameters embedded");
  c->add_option("--model,-m", o->model, "model folder (diffusers layout)")->required();
  c->add_option("--prompt,-p", o->prompt, "the prompt")->required();
  c->add_option("--negative,-n", o->negative, "negative prompt (default \"\"; used when cfg > 1)");
  c->add_option("--width,-W", o->width, "width in pixels, a multiple of the model's scale factor (default 1024)");
  c->add_option("--height,-H", o->height, "height in pixels (default 1024)");
  c->add_option("--steps", o->steps, "denoising steps (default: 50, Turbo 8)");
  c->add_option("--cfg", o->cfg, "guidance scale; 1 turns guidance off (default: 4, Turbo 1)");
  c->add_option("--seed", o->seed, "seed of the initial noise (default: random); image i of a batch uses seed + i");
  c->add_option("--batch", o->batch, "images to generate (default 1)");
  c->add_option("--output,-o", o->out, "output PNG; %d (or %03d) is replaced by the image index (default out.png)");
  c->add_option("--device", o->device, "cpu, cuda or cuda:N (default cpu)");
  c->add_option("--dtype", o->dtype, "activation type: f32 (CPU) or bf16 (CUDA default)");
  c->add_option("--quantize", o->quantize, "quantize the DiT's linear weights at load: fp8 (W8A8, Hopper fp8 tensor "
                                           "cores) or int8 (weight-only); first/last blocks stay bf16; the text "
                                           "encoder's projections to int8 (weight-only)");
  c->add_option("--attention", o->attention, "bf16 (default) or fp8: the fp8 DiT blocks run attention on the fp8 "
                                             "tensor cores too (Hopper; q, k, P and v in e4m3)");
  c->add_option("--threads", o->threads, "CPU threads (default: all cores)");
  c->add_option("--init-latents", o->init_latents, "safetensors file with tensor `latents` [B, C, H/s, W/s]: the initial noise");
  c->add_option("--save-latents", o->save_latents, "write the initial noise (tensor `latents`) to this safetensors file");
  c->add_flag("--quiet,-q", o->quiet, "print nothing but errors");
  c->add_option("--progress", o->progress, "bar (default) or json (one JSON object per line on stderr)");
  c->add_flag("--pe", o->pe, "rewrite the prompt with the model's prompt enhancer first");
  c->add_option("--offload", o->offload,
                "low-VRAM mode: none (all resident), text-encoder (default: the prompt enhancer and text encoder "
                "are on the device only while used, the DiT loads after them), blocks (that, and the DiT blocks "
                "stream from pinned host memory each step; CUDA only)");
  c->add_option("--max-vram", o->max_vram, "GiB of device memory to stay under: picks the least offloading whose "
                "estimated peak fits and caps the allocator there (CUDA only)");
  c->add_flag("--vae-tiling", o->vae_tiling, "decode the image in tiles (less memory; on CUDA it is automatic when "
              "the whole decode would not fit)");
  c->add_option("--vae-tile", o->vae_tile, "tile side in pixels when tiling, a multiple of the VAE's 8 (default: 512 "
                "or less to fit)");
  return std::function<int()>([o, c] { return run(*o, *c); });
});

}  // namespace
}  // namespace ernie::cli
