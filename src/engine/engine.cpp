// Engine::open (validate -> open the model once -> plan memory -> load) and ErnieImagePipeline on the op set:
// tokenizer -> text encoder (hidden_states[-2]) -> Euler/CFG loop over the DiT -> BatchNorm de-normalisation,
// unpatchify, VAE decode -> postprocess to [0, 1] and uint8.
#include "engine/engine.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <mutex>

#include "core/error.h"
#include "models/quant_policy.h"
#include "io/model_folder.h"
#include "io/model_tokenizer.h"
#include "models/ernie_dit.h"
#include "models/flux2_vae.h"
#include "models/mistral.h"
#include "models/prompt_enhancer.h"
#include "ops/ops.h"
#include "engine/init_image.h"
#include "engine/noise.h"
#include "ops/collectives/communicator.h"
#include "engine/parallel/data_parallel_engine.h"
#include "ops/collectives/local_communicator.h"
#include "ops/collectives/nccl_communicator.h"
#include "engine/parallel/parallel_plan.h"
#include "engine/sampler.h"
#include "engine/samplers/flow_solver.h"
#include "engine/scheduler.h"
#include "models/vae_tiling.h"
#include "text/tokenizer.h"

namespace ernie {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// VaeImageProcessor.postprocess: (x / 2 + 0.5).clamp(0, 1), NCHW -> NHWC; then numpy_to_pil's
// (x * 255).round() (half to even).
void postprocess(const Tensor& decoded, float* image_f32, std::vector<uint8_t>& rgb) {
  const int64_t H = decoded.dim(2), W = decoded.dim(3), HW = H * W;
  std::vector<float> x = decoded.to_vector();
  rgb.resize(size_t(HW) * 3);
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t i = 0; i < HW; ++i) {
      float v = x[size_t(c * HW + i)] / 2.0f + 0.5f;
      v = std::min(std::max(v, 0.0f), 1.0f);
      image_f32[i * 3 + c] = v;
      rgb[size_t(i * 3 + c)] = uint8_t(std::nearbyint(v * 255.0f));
    }
}

// The options as the loaded engine uses them: parsed, and with the memory plan applied.
struct Settings {
  std::string model_dir;
  Device device = kCPU;
  DType dtype = DType::F32;
  int threads = 0;
  std::optional<DType> quantize;
  bool attention_fp8 = false;
  bool keep_text_encoder = true;  // offload none: every component loaded at open and resident
  bool offload_blocks = false;    // offload blocks: the DiT's blocks streamed from pinned host memory
  size_t memory_limit = 0;        // the allocator's cap (--max-vram); 0 = none
  bool load_pe = false;
  bool load_denoiser = true;
  bool round_timesteps = true;
  bool random_weights = false, sync_phases = false;
  uint64_t random_seed = 1;
  VaeTilingMode vae_tiling = VaeTilingMode::Auto;
  int vae_tile = 0;
  std::string lora_dir;
  bool lora_at_runtime = false;
  std::function<void(const std::string&, const Tensor&)> observe_dit_inputs;
  ParallelPlan parallel;  // --gpus / --parallel (engine/parallel/parallel_plan.h)
};

// Every flag, before the model is opened.
Settings parse_settings(const EngineOptions& o, MemoryFlags& mem) {
  Settings s;
  ERNIE_CHECK(!o.random_weights || (!o.files.any() && o.pe != PeLoad::Required),
              "random weights: give no component file and no prompt enhancer");
  ERNIE_CHECK(o.random_weights || !o.model.empty() || o.files.any(), "--model: no model given (a model folder or a converted file, or "
              "every component as a file: --diffusion-model, --text-encoder, --vae and --tokenizer)");
  s.model_dir = o.model.empty() ? (o.random_weights ? "random" : o.files.diffusion_model) : o.model;
  s.parallel = plan_parallel(o.gpus, o.parallel, o.parallel_local, o.device, ops::cuda_device_count(), nccl_built(),
                             s.device);
  if (o.gpus.empty()) s.device = parse_device_option(o.device);
  for (size_t r = 1; r < s.parallel.gpus.size(); ++r)  // the other ranks' GPUs (the first is s.device, checked below)
    if (const std::string why = ops::unusable_reason(Device{DeviceKind::CUDA, s.parallel.gpus[r]}); !why.empty())
      fail("--gpus cuda:", std::to_string(s.parallel.gpus[r]), ": ", why);
  ERNIE_CHECK(s.device.is_cpu() || ops::cuda_built(), "--device ", s.device.str(), ": this build has no CUDA backend");
  ERNIE_CHECK(s.device.is_cpu() || s.device.index < ops::cuda_device_count(), "--device ", s.device.str(), ": ",
              std::to_string(ops::cuda_device_count()), " CUDA device(s) visible");
  if (!s.device.is_cpu())
    if (const std::string why = ops::unusable_reason(s.device); !why.empty()) fail("--device ", s.device.str(), ": ", why);
  s.dtype = parse_dtype_option(o.dtype, s.device);
  ERNIE_CHECK(!s.device.is_cpu() || s.dtype == DType::F32, "--dtype ", dtype_name(s.dtype),
              ": the CPU backend computes in f32");
  ERNIE_CHECK(o.threads >= 0, "--threads ", std::to_string(o.threads), " must not be negative");
  s.threads = o.threads;
  s.quantize = parse_quantize_option(o.quantize);
  s.attention_fp8 = parse_attention_option(o.attention);
  ERNIE_CHECK(o.vae_tile >= 0, "--vae-tile ", std::to_string(o.vae_tile), " must not be negative");
  s.vae_tile = o.vae_tile;
  s.vae_tiling = o.vae_tiling;
  s.lora_dir = o.lora_dir;
  s.lora_at_runtime = parse_lora_apply_option(o.lora_apply);
  s.load_denoiser = o.load_denoiser;
  s.round_timesteps = o.round_timesteps;
  s.random_weights = o.random_weights;
  s.random_seed = o.random_seed;
  s.sync_phases = o.sync_phases;
  s.observe_dit_inputs = o.observe_dit_inputs;
  mem = MemoryFlags{o.offload, o.max_vram_gib};
  check_memory_flags(mem, s.device);
  return s;
}

// Images per denoiser batch when requests are batched (Engine::generate_batch).
constexpr int kMaxBatchImages = 16;

// Bytes of the tensors a load reads from the model: `c`'s tensors except those whose name (after the
// component's prefix) starts with one of `unused`.
size_t read_bytes(const Component& c, const std::vector<std::string>& unused = {}) {
  size_t n = 0;
  for (const TensorInfo* t : c.ckpt.tensors()) {
    if (t->name.rfind(c.prefix, 0) != 0) continue;
    bool skip = false;
    for (const std::string& u : unused) skip = skip || t->name.compare(c.prefix.size(), u.size(), u) == 0;
    if (!skip) n += t->end - t->begin;
  }
  return n;
}

// EngineOptions::random_weights: the released configs (the config structs' defaults, the scheduler's shift 4)
// and no checkpoint; the components are built with random weights as they load.
ModelFolder released_random_model() {
  ModelFolder m;
  m.root = "random";
  m.scheduler.shift = 4.0f;
  for (Component* c : {&m.transformer_c, &m.text_encoder_c, &m.vae_c}) c->name = "random";
  return m;
}

class ErnieEngine final : public Engine {
 public:
  // Resident (keep_text_encoder): every component is loaded now. Offloaded: only the tokenizer; the
  // prompt enhancer and text encoder load when a request needs them, the denoiser after the first encoding.
  ErnieEngine(const Settings& opt, ModelFolder m, std::optional<Tokenizer> tok, const EngineInfo& info,
              const ProgressFn& progress)
      : opt_(opt), m_(std::move(m)), limits_(model_limits(m_)), tokenizer_(std::move(tok)), info_(info),
        loras_(opt.lora_dir, m_.dit) {
    if (opt.device.is_cpu()) ops::set_threads(opt.threads);
    if (opt.memory_limit) ops::set_memory_limit(opt.device, opt.memory_limit);
    for (size_t r = 1; r < opt.parallel.gpus.size(); ++r)  // every rank's GPU gets the plan's cap
      if (opt.memory_limit) ops::set_memory_limit(rank_device(int(r)), opt.memory_limit);
    if (opt.parallel.split())
      group_ = opt.parallel.local_ranks > 0 ? make_local_group(opt.parallel.local_ranks, opt.device)
                                            : make_nccl_group(opt.parallel.gpus);
    const bool resident = opt.keep_text_encoder;
    const int total = resident ? (opt.load_pe ? 5 : 4) : 1;
    auto t0 = Clock::now();
    loads_now_ = {};
    auto report = [&](int step) {
      if (progress) progress({"load", step, total, seconds_since(t0)});
    };
    report(0);
    report(1);
    if (!resident) return;
    load_text_encoder({});
    report(2);
    if (opt.load_denoiser) {
      load_denoiser({}, {});
      report(3);
    }
    report(4);
    if (opt.load_pe) {
      load_prompt_enhancer({});
      report(5);
    }
    loads_now_.cuda_init_s = info_.loads.cuda_init_s;
    info_.loads = loads_now_;
  }

  const EngineInfo& info() const override { return info_; }
  const ModelLimits& limits() const override { return limits_; }
  bool has_prompt_enhancer() const override { return m_.has_prompt_enhancer(); }
  size_t max_prompt_tokens() const override { return tokenizer_ ? tokenizer_->model_max_length() : 0; }

  GenerateRequest resolve(const GenerateRequest& req) const override {
    GenerateRequest r = resolve_request(req, limits_);
    if (r.use_pe)
      ERNIE_CHECK(opt_.load_pe, "prompt enhancer requested, but ",
                  m_.has_prompt_enhancer() ? "it was not loaded (started with --no-pe, or without --pe)"
                                           : "this model has no prompt enhancer (pe/ folder)");
    std::vector<LoraRef> negative_tags;
    strip_lora_tags(r.negative_prompt, &negative_tags);
    ERNIE_CHECK(negative_tags.empty(), "negative prompt: LoRA tags belong in the prompt (<lora:",
                negative_tags[0].name, ">)");
    r.loras = loras_.resolve(r.loras, r.prompt);
    for (int64_t id : r.prompt_ids)
      ERNIE_CHECK(id >= 0 && id < m_.text_encoder.vocab_size, "prompt token id ", std::to_string(id),
                  " is outside the text encoder's vocabulary of ", std::to_string(m_.text_encoder.vocab_size));
    return r;
  }
  std::vector<LoraLibrary::Available> available_loras() const override { return loras_.available(); }

  GenerateResult generate(const GenerateRequest& req, const ProgressFn& progress,
                          const std::atomic<bool>* cancel) override {
    return std::move(generate_batch({req}, progress, cancel)[0]);
  }

  // Requests of one shape share the denoiser's batch: row b of the latents is image b of its request,
  // from that request's seed (image i: seed + i) and prompt, so each result is what generate() alone gives.
  int max_batch_images() const override { return kMaxBatchImages; }
  std::vector<GenerateResult> generate_batch(const std::vector<GenerateRequest>& reqs, const ProgressFn& progress,
                                             const std::atomic<bool>* cancel) override {
    ERNIE_CHECK(opt_.load_denoiser, "this pipeline was loaded for text encoding only");
    ERNIE_CHECK(!reqs.empty(), "generate_batch: no requests");
    std::vector<GenerateResult> res(reqs.size());
    int images = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      res[i].resolved = resolve(reqs[i]);
      const GenerateRequest &r = res[i].resolved, &r0 = res[0].resolved;
      ERNIE_CHECK(r.width == r0.width && r.height == r0.height && r.steps == r0.steps && r.cfg == r0.cfg &&
                      r.sampler == r0.sampler && r.shift == r0.shift && r.loras == r0.loras &&
                      r.strength == r0.strength && r.init_image.has_value() == r0.init_image.has_value() &&
                      r.mask.has_value() == r0.mask.has_value(),
                  "generate_batch: request ", std::to_string(i), " (", std::to_string(r.width), "x",
                  std::to_string(r.height), ", ", std::to_string(r.steps), " steps, cfg ", std::to_string(r.cfg),
                  ", sampler ", sampler_id(r.sampler), ") differs from the first in size, steps, cfg, sampler, shift, ",
                  "LoRAs, strength or having an init image or mask");
      images += r.num_images;
    }
    ERNIE_CHECK(reqs.size() == 1 || images <= kMaxBatchImages, "generate_batch: ", std::to_string(images),
                " images in one batch; at most ", std::to_string(kMaxBatchImages));
    const GenerateRequest& r0 = res[0].resolved;
    std::lock_guard<std::mutex> lock(mu_);
    auto check_cancel = [&] {
      if (cancel && cancel->load()) throw Cancelled();
    };
    loads_now_ = {};

    // [Phase 1] prompt enhancer (on the prompt without its LoRA tags)
    for (GenerateResult& x : res) {
      const GenerateRequest& r = x.resolved;
      x.revised_prompt = strip_lora_tags(r.prompt);
      if (r.use_pe) {
        check_cancel();
        x.revised_prompt = enhance_prompt_locked(r.prompt, r.width, r.height, r.seed, progress, cancel);
      }
    }
    offload(pe_);

    // [Phase 2] text encoding
    const bool do_cfg = r0.cfg > 1.0f;
    load_text_encoder(progress);
    auto t0 = Clock::now();
    int n_enc = 0;
    for (const GenerateResult& x : res) n_enc += do_cfg && !x.resolved.negative_prompt.empty() ? 2 : 1;
    if (progress) progress({"encode", 0, n_enc, 0});
    SamplerInput in;
    for (GenerateResult& x : res) {
      const GenerateRequest& r = x.resolved;
      check_cancel();
      bool& cut = x.prompt_truncated;
      Tensor cond = encode_ids_locked(r.prompt_ids.empty() ? tokenize(x.revised_prompt, &cut) : r.prompt_ids);
      in.cond.insert(in.cond.end(), size_t(r.num_images), cond);
      if (do_cfg) {
        Tensor uncond =
            r.negative_prompt.empty() ? empty_negative() : encode_ids_locked(tokenize(r.negative_prompt, &cut));
        in.uncond.insert(in.uncond.end(), size_t(r.num_images), uncond);
      }
    }
    offload(text_encoder_);
    const double encode_s = seconds_since(t0);
    if (progress) progress({"encode", n_enc, n_enc, encode_s});
    // Offloaded mode: after the first encoding, so the two never share the device. Another LoRA set reloads the DiT.
    const double lora_switch_s = load_denoiser(progress, r0.loras);

    // [Phase 3] denoising
    std::vector<Tensor> noise;
    for (const GenerateResult& x : res) {
      const GenerateRequest& r = x.resolved;
      // The reference draws the whole [B, ...] batch of a request in the pipeline's dtype (engine/noise.h).
      noise.push_back(r.init_latents ? *r.init_latents
                                     : initial_noise(latent_shape(r, limits_), r.seed, r.rng, opt_.dtype, opt_.device));
    }
    if (noise.size() == 1) {
      in.latents = noise[0];
    } else {
      for (Tensor& t : noise) t = t.to(kCPU).to_f32();
      in.latents = ops::concat(noise, 0);
    }
    in.cfg = r0.cfg;
    in.round_timesteps = opt_.round_timesteps;
    const Shape shape = latent_shape(r0, limits_);
    std::unique_ptr<FlowSolver> solver =
        make_flow_solver(r0.sampler, m_.scheduler, r0.steps, shape[2] * shape[3], r0.shift);
    // img2img: x0 of every image, the latent mask, and the steps that run (engine/init_image.h); each mask's
    // pixel weights serve the latent mask and the composite.
    std::vector<std::vector<float>> mask_w(res.size());
    for (size_t i = 0; i < res.size(); ++i)
      if (const GenerateRequest& r = res[i].resolved; r.mask) mask_w[i] = mask_weights(*r.mask, r.mask_blur);
    const double vae_encode_s = r0.init_image ? encode_init_images(res, mask_w, in, progress, check_cancel) : 0.0;
    const int run_steps = r0.steps - in.first_step;
    t0 = Clock::now();
    if (progress) progress({"denoise", 0, run_steps, 0});
    const std::function<void(int, const Tensor&)> on_step = [&](int step, const Tensor& x) {
      if (!progress) return;
      Progress p{"denoise", step, run_steps, seconds_since(t0)};
      p.latents = &x;  // for live previews (the server's `preview` events)
      progress(p);
    };
    // --parallel cfg: the rows split over the ranks when there are two (cfg > 1); one row runs on rank 0 alone.
    // --parallel ulysses: every forward split over the ranks' tokens.
    const bool seq = group_ && opt_.parallel.mode == ParallelMode::Ulysses;
    const bool split = group_ && (seq || do_cfg);
    Tensor latents;
    double denoise_enqueue_s = 0;
    if (!split) {
      latents = sample_cfg(*dit_, *solver, opt_.device, opt_.dtype, in, on_step, cancel);
    } else {
      ops::synchronize(opt_.device);  // the inputs are complete before another GPU's stream copies them
      run_ranks(*group_, [&](Communicator& c) {
        std::unique_ptr<FlowSolver> own;  // a solver per rank (the multistep ones keep state)
        if (c.rank() > 0) own = make_flow_solver(r0.sampler, m_.scheduler, r0.steps, shape[2] * shape[3], r0.shift);
        Tensor x = sample_cfg(rank_dit(c.rank()), own ? *own : *solver, c.device(), opt_.dtype, in,
                              c.rank() == 0 ? on_step : std::function<void(int, const Tensor&)>{}, cancel,
                              seq ? nullptr : &c, seq ? &c : nullptr);
        if (c.rank() == 0) latents = x;
      });
    }
    denoise_enqueue_s = seconds_since(t0);
    sync_phase();
    const double denoise_s = seconds_since(t0);

    // [Phase 4] decode, one image at a time (the VAE's activations dominate memory at large sizes). The
    // denoiser's cached activation blocks are given back first: the decode needs other sizes, and keeping
    // both would hold ~1.7 GiB more at 1024² than either phase uses.
    t0 = Clock::now();
    ops::release_cached_memory(opt_.device);
    if (progress) progress({"decode", 0, images, 0});
    int row = 0;
    double postprocess_s = 0;
    for (size_t i = 0; i < res.size(); ++i) {
      GenerateResult& x = res[i];
      const GenerateRequest& r = x.resolved;
      x.latents = latents.narrow(row, r.num_images).to(kCPU);
      x.image_f32 = Tensor::empty({r.num_images, r.height, r.width, 3}, DType::F32);
      for (int b = 0; b < r.num_images; ++b, ++row) {
        check_cancel();
        Tensor z = vae_->denormalize_and_unpatchify(latents.narrow(row, 1));
        bool tiled = false;
        Tensor decoded = decode_latent(z, tiled);
        x.vae_tiled = x.vae_tiled || tiled;
        if (const std::optional<DType> q = dit_->quantized_dtype()) x.dit_weights = *q == DType::I8 ? "int8" : "fp8";
        x.attention_fp8 = dit_->runs_fp8_attention();
        ERNIE_CHECK(decoded.dim(1) == 3 && decoded.dim(2) == r.height && decoded.dim(3) == r.width,
                    "vae decode returned ", shape_str(decoded.shape()));
        Image img{r.width, r.height, {}, {}};
        float* f32 = x.image_f32.f32() + size_t(b) * r.height * r.width * 3;
        sync_phase();
        const auto tp = Clock::now();
        postprocess(decoded, f32, img.rgb);
        if (r.composite) composite_over(*r.init_image, mask_w[i], f32, img.rgb);
        postprocess_s += seconds_since(tp);
        x.images.push_back(std::move(img));
        if (progress) progress({"decode", row + 1, images, seconds_since(t0)});
      }
    }
    const double decode_s = seconds_since(t0);
    for (GenerateResult& x : res) {
      x.encode_s = encode_s;
      x.denoise_s = denoise_s;
      x.decode_s = decode_s;
      x.vae_encode_s = vae_encode_s;
      x.lora_switch_s = lora_switch_s;
      x.denoise_enqueue_s = denoise_enqueue_s;
      x.postprocess_s = postprocess_s;
      x.loads = loads_now_;
      x.parallel = !split ? "" : seq ? "ulysses" : "cfg";
    }
    return res;
  }

  Tensor encode_prompt(const std::string& prompt) override {
    std::lock_guard<std::mutex> lock(mu_);
    load_text_encoder({});
    Tensor h = encode_ids_locked(tokenize(prompt));
    offload(text_encoder_);
    return h;
  }

  std::string enhance_prompt(const std::string& prompt, int width, int height) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::string text = enhance_prompt_locked(prompt, width, height, 0, {}, nullptr);
    offload(pe_);
    return text;
  }

  int scale_factor() const override { return limits_.scale_factor; }
  std::vector<std::pair<int, int>> supported_sizes() const override {
    // The resolutions ERNIE-Image recommends (W, H) at its scale factor 16, as DiT token grids: a model
    // with a smaller scale factor (the tiny test model: 4) gets the same grids, so smaller images.
    static const std::vector<std::pair<int, int>> sizes = {{1024, 1024}, {848, 1264}, {1264, 848}, {768, 1376},
                                                           {1376, 768},  {896, 1200}, {1200, 896}};
    const int s = limits_.scale_factor;
    std::vector<std::pair<int, int>> out;
    for (auto [w, h] : sizes)
      if (w % 16 == 0 && h % 16 == 0) out.push_back({w / 16 * s, h / 16 * s});
    return out;
  }
  bool turbo() const override { return limits_.turbo; }
  const std::string& model_dir() const override { return m_.root; }
  LoadCounts load_counts() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return loads_;
  }
  DeviceMemory device_memory(bool reset_peak) override {
    std::lock_guard<std::mutex> lock(mu_);
    DeviceMemory d;
    if (opt_.device.is_cpu()) return d;
    ops::synchronize(opt_.device);
    if (reset_peak) ops::reset_peak_memory(opt_.device);
    const ops::MemoryStats m = ops::memory_stats(opt_.device);
    d.in_use = m.in_use_bytes;
    d.peak_in_use = m.peak_in_use_bytes;
    d.peak_reserved = m.peak_reserved_bytes;
    if (dit_ && dit_->block_streamer()) d.streamed_bytes = dit_->block_streamer()->host_bytes();
    if (base_weights_) d.pinned_base_bytes = base_weights_->bytes();
    return d;
  }
  std::pair<double, double> dit_flops(int64_t tokens, int rows) const override {
    const double H = m_.dit.hidden_size, F = m_.dit.ffn_hidden_size, L = m_.dit.num_layers, S = double(tokens);
    return {L * (8.0 * S * H * H + 6.0 * S * H * F) * rows, L * 4.0 * S * S * H * rows};
  }
  double measure_upload_gbps() override {
    std::lock_guard<std::mutex> lock(mu_);
    return dit_ && dit_->block_streamer() ? dit_->block_streamer()->measure_upload_gbps() : 0.0;
  }

 private:
  Settings opt_;
  ModelFolder m_;
  ModelLimits limits_;
  std::optional<Tokenizer> tokenizer_;
  EngineInfo info_;
  std::optional<TextEncoder> text_encoder_;
  std::optional<ErnieDit> dit_;
  std::vector<std::optional<ErnieDit>> rank_dits_;  // NCCL ranks 1.. : their own copy of the weights on their GPU
  std::unique_ptr<CommGroup> group_;                // the parallel ranks (--parallel cfg); null: one device
  std::optional<Flux2Vae> vae_;
  std::optional<PromptEnhancer> pe_;
  LoraLibrary loras_;
  std::vector<LoraRef> dit_loras_;  // the LoRAs merged into dit_
  std::optional<HostWeightCache> base_weights_;  // the DiT's stored weights, pinned (see load_denoiser)
  Tensor empty_negative_;  // [T, hidden] F32 host: encode_prompt(""), encoded on first use
  LoadCounts loads_;
  LoadTimes loads_now_;  // the loads of the call (open, or a generate_batch) under way
  mutable std::mutex mu_;

  // img2img: each request's init image VAE-encoded (the posterior's mode; tiled as a decode of its size
  // would be), patchified and normalised into in.x0, one row per image; the latent mask from the masks' pixel
  // weights `mask_w` (one per request) into in.mask; the first step from the strength. Returns the seconds the
  // encodes took.
  template <class CheckCancel>
  double encode_init_images(const std::vector<GenerateResult>& res, const std::vector<std::vector<float>>& mask_w,
                            SamplerInput& in, const ProgressFn& progress, const CheckCancel& check_cancel) {
    const auto t0 = Clock::now();
    if (progress) progress({"encode_image", 0, int(res.size()), 0});
    std::vector<Tensor> x0, mask;
    for (size_t i = 0; i < res.size(); ++i) {
      const GenerateRequest& r = res[i].resolved;
      check_cancel();
      const Tensor img = image_to_tensor(*r.init_image);
      const int vs = m_.vae.spatial_scale();
      const std::optional<VaeTiling> t = vae_tiling_for(img.dim(2) / vs, img.dim(3) / vs);
      const Tensor mean = t ? vae_encode_mean_tiled(*vae_, img, *t) : vae_->encode(img).first;
      const Tensor z = vae_->patchify_and_normalize(mean).to(kCPU).to_f32();
      x0.insert(x0.end(), size_t(r.num_images), z);
      if (r.mask)
        mask.push_back(latent_mask(mask_w[i], r.width, r.height, r.num_images, z.dim(1), z.dim(2), z.dim(3)));
      if (progress) progress({"encode_image", int(i) + 1, int(res.size()), seconds_since(t0)});
    }
    in.x0 = x0.size() == 1 ? x0[0] : ops::concat(x0, 0);
    if (!mask.empty()) in.mask = mask.size() == 1 ? mask[0] : ops::concat(mask, 0);
    in.first_step = first_step(res[0].resolved);
    return seconds_since(t0);
  }

  // The tiling a decode of an h×w latent gets (EngineOptions::vae_tiling); nullopt: untiled.
  std::optional<VaeTiling> vae_tiling_for(int64_t h, int64_t w) const {
    const int vs = m_.vae.spatial_scale();
    if (opt_.vae_tiling == VaeTilingMode::Off) return std::nullopt;
    const bool force = opt_.vae_tiling == VaeTilingMode::On;
    std::optional<VaeTiling> t;
    if (opt_.device.is_cuda())
      t = auto_vae_tiling(m_.vae, h, w, opt_.dtype, ops::available_bytes(opt_.device), force);
    if (force && !t) t = VaeTiling{};  // the CPU: activations live on the host either way
    if (t && opt_.vae_tile > 0) t->tile = opt_.vae_tile / vs;
    return t;
  }

  // VAE decode of one image's latent, tiled when vae_tiling_for says so (`tiled`: more than one tile ran).
  Tensor decode_latent(const Tensor& z, bool& tiled) const {
    const std::optional<VaeTiling> t = vae_tiling_for(z.dim(2), z.dim(3));
    tiled = t && (z.dim(2) > t->tile || z.dim(3) > t->tile);
    return t ? vae_decode_tiled(*vae_, z, *t) : vae_->decode(z);
  }

  // EngineOptions::sync_phases: the device's queued work done, so the phase timed so far is complete.
  void sync_phase() const {
    if (opt_.sync_phases) ops::synchronize(opt_.device);
  }
  // Runs `load`; returns its seconds (synchronised with sync_phases) and counts the device memory it took.
  template <class LoadFn>
  double timed_load(LoadFn&& load) {
    const size_t in_use = ops::memory_stats(opt_.device).in_use_bytes;
    const auto t0 = Clock::now();
    load();
    sync_phase();
    const double s = seconds_since(t0);
    loads_now_.device_bytes += ops::memory_stats(opt_.device).in_use_bytes - in_use;
    return s;
  }
  // A component loaded when it is missing (offloaded mode: reported as a "load" phase of the request).
  template <class LoadFn>
  void load_component(bool missing, int& count, const ProgressFn& progress, LoadFn&& load) {
    if (!missing) return;
    auto t0 = Clock::now();
    if (progress) progress({"load", 0, 1, 0});
    load();
    ++count;
    if (progress) progress({"load", 1, 1, seconds_since(t0)});
  }
  void load_text_encoder(const ProgressFn& progress) {
    load_component(!text_encoder_, loads_.text_encoder, progress, [&] {
      const std::optional<DType> q = QuantPolicy{}.text_encoder_quantization(opt_.quantize);
      loads_now_.text_encoder_s = timed_load([&] {
        text_encoder_ = opt_.random_weights
                            ? TextEncoder::random(m_.text_encoder, opt_.device, opt_.dtype, opt_.random_seed + 10, q)
                            : TextEncoder::load(m_, opt_.device, opt_.dtype, q);
      });
      loads_now_.text_encoder_bytes = text_encoder_->weight_bytes();
      // its unused last layer and final norm are not read (hidden_states[-2])
      const std::string last = "layers." + std::to_string(m_.text_encoder.num_hidden_layers - 1) + ".";
      if (!opt_.random_weights) loads_now_.read_bytes += read_bytes(m_.text_encoder_c, {last, "norm."});
    });
  }
  void load_prompt_enhancer(const ProgressFn& progress) {
    ERNIE_CHECK(m_.pe_c.has_value(), opt_.model_dir, ": no prompt enhancer (pe/ folder) in this model");
    load_component(!pe_, loads_.prompt_enhancer, progress, [&] {
      loads_now_.prompt_enhancer_s = timed_load([&] { pe_ = PromptEnhancer::load(m_, opt_.device, opt_.dtype); });
    });
  }
  // The DiT with `loras` merged (and the VAE). A DiT with another set is freed and built again from the
  // stored weights, so every set starts from the exact base weights; returns the seconds that switch took.
  // On CUDA (resident blocks), an engine that may switch (a LoRA directory, or a first switch) keeps the stored
  // weights in pinned host memory (models/host_weight_cache.h), so a switch uploads at the bus's speed.
  double load_denoiser(const ProgressFn& progress, const std::vector<LoraRef>& loras) {
    const auto t0 = Clock::now();
    const bool do_switch = dit_ && !(dit_loras_ == loras);
    if (do_switch) {
      dit_.reset();
      ops::release_cached_memory(opt_.device);
      for (size_t r = 0; r < rank_dits_.size(); ++r) {
        rank_dits_[r].reset();
        ops::release_cached_memory(rank_device(int(r + 1)));
      }
    }
    if (!base_weights_ && opt_.device.is_cuda() && !opt_.offload_blocks && (do_switch || !opt_.lora_dir.empty()))
      base_weights_.emplace(opt_.device, HostWeightCache::default_budget());
    load_component(!dit_, loads_.denoiser, progress, [&] {
      loads_now_.denoiser_s = timed_load([&] {
        dit_ = opt_.random_weights
                   ? ErnieDit::random(m_.dit, opt_.device, opt_.dtype, opt_.random_seed, opt_.offload_blocks,
                                      opt_.quantize, QuantPolicy{}, loras_.set(loras), opt_.lora_at_runtime)
                   : ErnieDit::load(m_, opt_.device, opt_.dtype, opt_.offload_blocks, opt_.quantize, QuantPolicy{},
                                    loras_.set(loras), opt_.lora_at_runtime, base_weights_ ? &*base_weights_ : nullptr);
      });
      loads_now_.denoiser_bytes = dit_->weight_bytes();
      if (!opt_.random_weights) loads_now_.read_bytes += read_bytes(m_.transformer_c);
      dit_loras_ = loras;
      dit_->set_input_observer(opt_.observe_dit_inputs);
      dit_->set_attention_fp8(opt_.attention_fp8);
      rank_dits_.resize(opt_.parallel.gpus.empty() ? 0 : opt_.parallel.gpus.size() - 1);
      for (size_t r = 0; r < rank_dits_.size(); ++r) {  // each other GPU its own copy, from the same stored weights
        rank_dits_[r] = ErnieDit::load(m_, rank_device(int(r + 1)), opt_.dtype, opt_.offload_blocks, opt_.quantize,
                                       QuantPolicy{}, loras_.set(loras), opt_.lora_at_runtime, nullptr);
        rank_dits_[r]->set_attention_fp8(opt_.attention_fp8);
      }
      if (!vae_) {
        loads_now_.vae_s = timed_load([&] {
          vae_ = opt_.random_weights ? Flux2Vae::random(m_.vae, opt_.device, opt_.dtype, opt_.random_seed + 20)
                                     : Flux2Vae::load(m_, opt_.device, opt_.dtype);
        });
        if (!opt_.random_weights) loads_now_.read_bytes += read_bytes(m_.vae_c);
      }
    });
    return do_switch ? seconds_since(t0) : 0.0;
  }
  // Rank r's device and DiT: with NCCL its GPU and its own copy; local ranks share the one device's DiT.
  Device rank_device(int r) const {
    return r == 0 || opt_.parallel.gpus.empty() ? opt_.device : Device{DeviceKind::CUDA, opt_.parallel.gpus[size_t(r)]};
  }
  const ErnieDit& rank_dit(int r) const { return r == 0 || rank_dits_.empty() ? *dit_ : *rank_dits_[size_t(r - 1)]; }

  // Offloaded mode: frees a component's device weights (and the allocator's cache of them) after use.
  template <class T>
  void offload(std::optional<T>& component) {
    if (opt_.keep_text_encoder || !component) return;
    component.reset();
    ops::release_cached_memory(opt_.device);
  }

  const Tensor& empty_negative() {
    if (!empty_negative_.defined()) empty_negative_ = encode_ids_locked(tokenize(""));
    return empty_negative_;
  }

  // encode_prompt: tokenizer(text, add_special_tokens=True, truncation=True) (cut at model_max_length, 2048
  // for the release); an empty result falls back to [bos] as the reference does.
  // `truncated` is set when the text was longer than that (never cut silently: the front ends say so).
  std::vector<int64_t> tokenize(const std::string& text, bool* truncated = nullptr) const {
    if (!tokenizer_) {  // random weights: only the empty (negative) prompt has ids of its own, [bos]
      ERNIE_CHECK(text.empty(), "this engine has random weights and no tokenizer: give the prompt as token ids");
      return {m_.text_encoder.bos_token_id};
    }
    std::vector<int64_t> ids = tokenizer_->encode(text, true, false);
    const size_t max_len = tokenizer_->model_max_length();
    if (max_len > 0 && ids.size() > max_len) {
      ids = tokenizer_->encode(text, true, true);
      if (truncated) *truncated = true;
    }
    if (ids.empty()) ids.push_back(tokenizer_->bos_id() >= 0 ? tokenizer_->bos_id() : m_.text_encoder.bos_token_id);
    return ids;
  }

  Tensor encode_ids_locked(const std::vector<int64_t>& ids) {
    load_text_encoder({});
    Tensor h = text_encoder_->encode(ids);
    return h.to(kCPU).to_f32();
  }

  // _enhance_prompt_with_pe with the reference's sampling settings; the draw is seeded with the request's
  // seed, so a run is repeatable (the reference's torch sampling is not).
  std::string enhance_prompt_locked(const std::string& prompt, int width, int height, uint64_t seed,
                                    const ProgressFn& progress, const std::atomic<bool>* cancel) {
    ERNIE_CHECK(opt_.load_pe, "prompt enhancer: the model was loaded without it (enable load_pe / --pe)");
    load_prompt_enhancer(progress);
    auto t0 = Clock::now();
    EnhanceOptions eo;
    SamplingParams sp = pe_->default_sampling();
    sp.seed = seed;
    eo.sampling = sp;
    eo.cancel = cancel;
    if (progress) {
      progress({"enhance", 0, pe_->default_max_new_tokens(), 0});
      eo.on_token = [&](int generated, int max_new) { progress({"enhance", generated, max_new, seconds_since(t0)}); };
    }
    EnhanceResult er = pe_->enhance(prompt, width, height, eo);
    const int n = int(er.generation.ids.size());
    if (progress) progress({"enhance", n, n, seconds_since(t0)});
    return er.text;
  }
};

}  // namespace

std::unique_ptr<Engine> Engine::open(const EngineOptions& o, const ProgressFn& progress) {
  // 1. validate: every flag, then the model's files (configs, checkpoint headers, tensor shapes).
  MemoryFlags mem;
  Settings s = parse_settings(o, mem);
  if (s.parallel.mode == ParallelMode::Data) return open_data_parallel(o, s.parallel, progress);
  // The device's context before any file is read: its cost is cuda_init_s, not the first load's.
  LoadTimes loads;
  if (s.device.is_cuda()) {
    const auto t0 = Clock::now();
    Tensor::zeros({1}, DType::F32, s.device);
    ops::synchronize(s.device);
    loads.cuda_init_s = seconds_since(t0);
  }
  const bool released = s.random_weights && o.model.empty();  // random weights of the released sizes
  ModelFolder m = released ? released_random_model() : ModelFolder::open(o.model, o.pe != PeLoad::Off, o.files);
  if (!s.random_weights) m.require_ok("text_encoder");
  if (s.load_denoiser && !s.random_weights) {
    m.require_ok("transformer");
    m.require_ok("vae");
  }
  s.load_pe = o.pe != PeLoad::Off && m.pe_c.has_value() && !s.random_weights;
  ERNIE_CHECK(o.pe != PeLoad::Required || m.pe_c.has_value(), m.root,
              ": --pe needs a prompt enhancer (pe/ folder), this model has none");
  if (s.load_pe) {
    ERNIE_CHECK(!m.pe_tokenizer_rel.empty(), m.root,
                ": the prompt enhancer has no tokenizer (pe_tokenizer/tokenizer.json or pe/tokenizer.json)");
    m.require_ok("pe");
  }
  const ModelLimits limits = model_limits(m);
  if (s.parallel.mode == ParallelMode::Ulysses && s.load_denoiser)
    ERNIE_CHECK(m.dit.num_attention_heads % s.parallel.ranks() == 0, "--parallel ulysses: the DiT's ",
                std::to_string(m.dit.num_attention_heads), " attention heads do not split over ",
                std::to_string(s.parallel.ranks()), " ranks");
  const int vs = m.vae.spatial_scale();
  ERNIE_CHECK(s.vae_tile % vs == 0, "--vae-tile ", std::to_string(s.vae_tile), " must be a positive multiple of the "
              "VAE's ", std::to_string(vs), " pixels per latent pixel");
  FlowMatchEulerScheduler check_scheduler(m.scheduler);  // unsupported scheduler options fail here
  std::optional<Tokenizer> tok;
  if (!released) tok = load_model_tokenizer(m, "tokenizer");

  // 2. plan: the request the front end will run, or what a server plans for; the least offloading that fits
  // --max-vram, else the mode asked for or the front end's default.
  GenerationShape g;
  std::optional<GenerateRequest> planned;
  if (o.plan_for) {
    planned = resolve_request(*o.plan_for, limits);
    const GenerateRequest& r = *planned;
    int prompt_tokens = int(r.prompt_ids.size());
    if (s.device.is_cuda() && mem.max_vram_gib && tok && r.prompt_ids.empty())
      prompt_tokens = int(std::max(tok->encode(r.prompt).size(), tok->encode(r.negative_prompt).size()));
    g = request_shape(r, s.dtype, prompt_tokens, s.vae_tiling);
  } else {
    ERNIE_CHECK(!released, "random weights without a model: give the request to plan for (EngineOptions::plan_for)");
    g = serving_shape(m, s.device, s.dtype, s.load_pe, s.vae_tiling);
  }
  const OffloadChoice c = plan_model_memory(m, g, mem, s.device, o.default_offload, s.quantize, s.load_pe,
                                            s.vae_tiling);
  s.keep_text_encoder = c.mode == Offload::None;
  s.offload_blocks = c.mode == Offload::Blocks;
  s.memory_limit = c.limit_bytes;
  if (c.vae_tiling) s.vae_tiling = VaeTilingMode::On;
  EngineInfo info;
  info.device = s.device;
  info.dtype = s.dtype;
  info.memory = c;
  info.vae_tiling_forced = s.vae_tiling == VaeTilingMode::On;
  info.pe_loaded = s.load_pe;
  info.parallel = parallel_mode_name(s.parallel.split() ? s.parallel.mode : ParallelMode::None);
  info.parallel_comm = !s.parallel.split() ? "" : s.parallel.local_ranks > 0 ? "local" : "nccl";
  info.gpus = s.parallel.gpus;
  info.planned = std::move(planned);
  info.loads = loads;
  info.text_vocab = m.text_encoder.vocab_size;
  if (s.device.is_cuda()) info.device_name = ops::device_name(s.device);

  // 3. load what the plan keeps resident.
  return std::make_unique<ErnieEngine>(s, std::move(m), std::move(tok), info, progress);
}

}  // namespace ernie
