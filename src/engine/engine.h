// The engine, the one front door: Engine::open(EngineOptions) validates the options, opens the model once,
// plans device memory and loads; generate() then runs prompt -> (optional prompt enhancer) -> text encoder ->
// denoising loop with classifier-free guidance -> VAE decode -> RGB images. The CLI, the server and the C API
// are thin layers over it: parse their options, open, generate, write.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "engine/lora_library.h"
#include "engine/memory_plan.h"
#include "engine/options.h"
#include "engine/request.h"

namespace ernie {

struct Progress {
  std::string phase;  // "load", "encode", "enhance", "encode_image" (img2img), "denoise", "decode"
  int step = 0, total = 0;
  double elapsed_s = 0;
  // "denoise" steps after the first: the current latents [B, 4L, H/s, W/s] (patchified, normalized, as the DiT
  // sees them), F32 on the run's device; valid only during the call. For live previews (engine/latent_preview.h):
  // copying them to the host costs a device-to-host transfer, so a callback should do it only when it is needed.
  const Tensor* latents = nullptr;
};
using ProgressFn = std::function<void(const Progress&)>;

// Where loading time went (issue 42): each component's load (read, convert, upload; with
// EngineOptions::sync_phases up to the device's last copy), the text encoder's and DiT's weights as placed on the
// device, and the device memory all these loads took. A component that did not load in that call stays 0.
struct LoadTimes {
  double cuda_init_s = 0;  // open: the device's context and its first allocation (0 on the CPU)
  double text_encoder_s = 0, prompt_enhancer_s = 0, denoiser_s = 0, vae_s = 0;
  size_t text_encoder_bytes = 0, denoiser_bytes = 0;  // weight bytes
  size_t device_bytes = 0;  // growth of the device memory in use over the loads (0 on the CPU)
  size_t read_bytes = 0;    // the model's tensors the loads read (0 with random weights)
  double total_s() const { return text_encoder_s + prompt_enhancer_s + denoiser_s + vae_s; }
};

struct GenerateResult {
  std::vector<Image> images;
  Tensor latents;            // final DiT latents (before de-normalisation), [B, 4L, H/s, W/s] F32 on the host
  Tensor image_f32;          // the float image in [0, 1], [B, H, W, 3], as the reference returns it
  std::string revised_prompt;  // the prompt actually encoded (after the prompt enhancer)
  bool prompt_truncated = false;  // the prompt or negative prompt was cut at the tokenizer's model_max_length
  GenerateRequest resolved;    // the request with defaults filled in
  double encode_s = 0, denoise_s = 0, decode_s = 0;
  double vae_encode_s = 0;   // img2img: the init images' VAE encode (0 without one)
  double lora_switch_s = 0;  // the DiT reloaded for another LoRA set before this request (0: no switch)
  double denoise_enqueue_s = 0;  // host time to queue the denoising loop (close to denoise_s: the host is the limit)
  double postprocess_s = 0;      // of decode_s: the images' copy to the host and conversion to [0, 1] and uint8
  LoadTimes loads;               // the components this call loaded (offloaded ones, a LoRA switch)
  bool vae_tiled = false;      // the decode ran tiled (EngineOptions::vae_tiling)
  std::string dit_weights;     // "fp8" / "int8": the DiT's blocks ran 8-bit weights (quantized or stored); else empty
  bool attention_fp8 = false;  // the fp8 blocks ran fp8 attention (EngineOptions::attention on Hopper)
  // "cfg": the denoiser's rows ran split over the parallel ranks; "": on one device (no --parallel, or a request at
  // cfg <= 1, which has a single row).
  std::string parallel;
};

// How many times each component was loaded onto the device (offloaded ones reload per request).
struct LoadCounts {
  int text_encoder = 0, prompt_enhancer = 0, denoiser = 0;
};

// How the engine was loaded: the device and activation type it runs, and the memory plan (engine/memory_plan.h)
// it chose from the options, for the front ends to report (serve's /v1/info, ernie_model_offload).
struct EngineInfo {
  Device device = kCPU;
  DType dtype = DType::F32;
  OffloadChoice memory;  // mode, tiling the plan counts on, allocator cap, estimated peak
  bool vae_tiling_forced = false;  // every decode tiles (--vae-tiling, or the plan needs it)
  bool pe_loaded = false;          // the prompt enhancer was loaded (requests may set use_pe)
  std::string parallel = "none";   // the --parallel mode as planned ("none", "cfg")
  std::string parallel_comm;       // "nccl", "local" (ranks on one device), "" without a split
  std::vector<int> gpus;           // rank r's CUDA device with NCCL; empty otherwise
  // EngineOptions::plan_for as resolve_request left it (defaults filled, seed drawn): the front end generates this
  // one, so the request is resolved once. Unset without a plan_for.
  std::optional<GenerateRequest> planned;
  LoadTimes loads;  // what open loaded (everything resident; only cuda_init_s when offloaded)
  std::string device_name;  // the GPU's name ("" on the CPU)
  int64_t text_vocab = 0;   // the text encoder's vocabulary: GenerateRequest::prompt_ids are below it
};

// Device memory, for bench (0 on the CPU): in use now, and the peaks since the last reset.
struct DeviceMemory {
  size_t in_use = 0, peak_in_use = 0, peak_reserved = 0;
  size_t streamed_bytes = 0;     // --offload blocks: the DiT blocks held in pinned host memory
  size_t pinned_base_bytes = 0;  // the DiT's stored weights kept pinned for LoRA switches
};

class Engine {
 public:
  // Validates `opt` (every flag, the model's files, a plan_for request), opens the model once, plans device
  // memory, and loads what the plan keeps resident; throws Error before loading any weights when something
  // is wrong. `progress` sees the "load" phase.
  static std::unique_ptr<Engine> open(const EngineOptions& opt, const ProgressFn& progress = {});
  virtual ~Engine() = default;
  virtual const EngineInfo& info() const = 0;
  virtual const ModelLimits& limits() const = 0;
  // Fills defaults and validates (sizes multiple of the scale factor, steps >= 1, cfg >= 0, ...);
  // throws Error before any compute.
  virtual GenerateRequest resolve(const GenerateRequest& req) const = 0;
  // `cancel` is polled between steps; when set, throws Cancelled.
  virtual GenerateResult generate(const GenerateRequest& req, const ProgressFn& progress = {},
                                  const std::atomic<bool>* cancel = nullptr) = 0;
  // Text encoder output for a prompt ([T, hidden] F32 on the host).
  virtual Tensor encode_prompt(const std::string& prompt) = 0;
  virtual std::string enhance_prompt(const std::string& prompt, int width, int height) = 0;
  virtual int scale_factor() const = 0;            // pixels per DiT token (16 released, 4 tiny)
  virtual std::vector<std::pair<int, int>> supported_sizes() const = 0;  // recommended (W, H)
  virtual bool turbo() const = 0;
  virtual const std::string& model_dir() const = 0;
  virtual bool has_prompt_enhancer() const = 0;  // the model has a pe/ folder (loaded or not)
  virtual size_t max_prompt_tokens() const = 0;  // where prompts are cut (the tokenizer's model_max_length; 0: none)
  virtual LoadCounts load_counts() const { return {}; }
  // For bench: the device's memory (`reset_peak`: the peaks start again from what is in use now), and the
  // host-to-device upload speed of the block streamer (0 without --offload blocks), measured with nothing else running.
  virtual DeviceMemory device_memory(bool reset_peak = false) { (void)reset_peak; return {}; }
  virtual double measure_upload_gbps() { return 0; }
  // FLOPs of one DiT forward over `rows` batch rows of `tokens` tokens (image and text): {GEMMs, attention}.
  virtual std::pair<double, double> dit_flops(int64_t tokens, int rows) const { (void)tokens, (void)rows; return {0, 0}; }
  // The LoRAs requests may name (EngineOptions::lora_dir; empty without one).
  virtual std::vector<LoraLibrary::Available> available_loras() const { return {}; }

  // Several resolved requests of one shape (same width, height, steps, cfg, sampler, shift, LoRAs) in one pass through
  // the denoiser; results in request order, each as generate() would return it; progress counts the
  // batch's steps. An engine that batches says how many images it takes at most; the default (1) means
  // it does not, and callers (the server) then never pass more than one request.
  virtual int max_batch_images() const { return 1; }
  virtual std::vector<GenerateResult> generate_batch(const std::vector<GenerateRequest>& reqs,
                                                     const ProgressFn& progress = {},
                                                     const std::atomic<bool>* cancel = nullptr) {
    if (reqs.size() != 1) throw Error("this engine does not batch requests; pass one at a time");
    return {generate(reqs[0], progress, cancel)};
  }
};

}  // namespace ernie
