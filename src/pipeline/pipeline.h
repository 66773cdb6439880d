// The ERNIE-Image pipeline: prompt -> (optional prompt enhancer) -> text encoder -> denoising loop with
// classifier-free guidance -> VAE decode -> RGB images. One object per loaded model; the CLI, the server
// and the C API are thin layers over it.
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

namespace ernie {

// VAE decode tiling (pipeline/vae_tiling.h): Auto tiles only when the untiled decode would not fit in the
// device's free memory (never on the CPU); On always tiles; Off never does.
enum class VaeTilingMode { Auto, On, Off };

struct PipelineOptions {
  std::string model_dir;
  Device device = kCPU;
  DType dtype = DType::F32;      // activations: F32 on CPU; BF16 (default) or F32 on CUDA
  int threads = 0;               // CPU threads, 0 = all
  // true (server): everything is loaded at start and stays resident. false (CLI, --offload text-encoder):
  // the prompt enhancer and the text encoder are loaded when a request needs them and freed right after,
  // and the denoiser is loaded after the first encoding, so one generation never holds the text encoder
  // and the DiT at once (later requests reload the text encoder next to the resident DiT).
  bool keep_text_encoder = true;
  // --quantize fp8|int8: the DiT's linear weights that QuantPolicy picks are quantized at load (fp8 runs W8A8
  // on Hopper's fp8 tensor cores, int8 W8A16; see ops::linear), and the text encoder's projections to int8
  // (QuantPolicy::text_encoder_quantization; run weight-only). A converted 8-bit file is used as stored.
  std::optional<DType> quantize;
  // --attention fp8: the DiT's fp8 blocks run attention in fp8 too (ErnieDit::set_attention_fp8; Hopper).
  bool attention_fp8 = false;
  bool offload_blocks = false;   // CUDA only (--offload blocks): DiT blocks stay in pinned host memory and
                                 // are streamed to the GPU block by block during each step
  size_t memory_limit = 0;       // CUDA: cap on the device memory the allocator takes (--max-vram), set for the
                                 // device process-wide (ops::set_memory_limit); 0 = leave it as it is
  bool load_pe = false;          // load the prompt enhancer (pe/) when present
  bool load_denoiser = true;     // false: tokenizer and text encoder only (encode_prompt); generate() throws
  bool round_timesteps = true;   // feed the DiT bf16-rounded timesteps in bf16, as the reference does
  VaeTilingMode vae_tiling = VaeTilingMode::Auto;
  int vae_tile = 0;              // tile side in image pixels (a multiple of the VAE's 8); 0 = the largest that fits
  // Calibration (pipeline/calibration.h): sees the float input of every DiT block linear in every step, under
  // the weight's checkpoint name (ErnieDit::set_input_observer).
  std::function<void(const std::string& weight, const Tensor& x)> observe_dit_inputs;
};

struct GenerateRequest {
  std::string prompt;
  std::string negative_prompt;  // default "" as the reference
  int width = 0, height = 0;    // 0 = model default (1024)
  int steps = 0;                // 0 = model default (50, Turbo 8)
  float cfg = -1;               // -1 = model default (4.0, Turbo 1.0); other negatives are rejected
  uint64_t seed = 0;
  int num_images = 1;           // images per prompt (batch)
  bool use_pe = false;          // rewrite the prompt with the prompt enhancer first
  std::optional<Tensor> init_latents;  // [B, 4L, H/s, W/s] patchified initial noise (reproduce a run)
};

struct Progress {
  std::string phase;  // "load", "encode", "enhance", "denoise", "decode"
  int step = 0, total = 0;
  double elapsed_s = 0;
};
using ProgressFn = std::function<void(const Progress&)>;

struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // height * width * 3
};

struct GenerateResult {
  std::vector<Image> images;
  Tensor latents;            // final DiT latents (before de-normalisation), [B, 4L, H/s, W/s] F32 on the host
  Tensor image_f32;          // the float image in [0, 1], [B, H, W, 3], as the reference returns it
  std::string revised_prompt;  // the prompt actually encoded (after the prompt enhancer)
  GenerateRequest resolved;    // the request with defaults filled in
  double encode_s = 0, denoise_s = 0, decode_s = 0;
  bool vae_tiled = false;      // the decode ran tiled (PipelineOptions::vae_tiling)
  std::string dit_weights;     // "fp8" / "int8": the DiT's blocks ran 8-bit weights (quantized or stored); else empty
  bool attention_fp8 = false;  // the fp8 blocks ran fp8 attention (PipelineOptions::attention_fp8 on Hopper)
};

// How many times each component was loaded onto the device (offloaded ones reload per request).
struct LoadCounts {
  int text_encoder = 0, prompt_enhancer = 0, denoiser = 0;
};

class Pipeline {
 public:
  static std::unique_ptr<Pipeline> load(const PipelineOptions& opt, const ProgressFn& progress = {});
  virtual ~Pipeline() = default;
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
  virtual LoadCounts load_counts() const { return {}; }

  // Several resolved requests of one shape (same width, height, steps, cfg, use_pe) in one pass through
  // the denoiser; results in request order, each as generate() would return it; progress counts the
  // batch's steps. A pipeline that batches says how many images it takes at most; the default (1) means
  // it does not, and callers (the server) then never pass more than one request.
  virtual int max_batch_images() const { return 1; }
  virtual std::vector<GenerateResult> generate_batch(const std::vector<GenerateRequest>& reqs,
                                                     const ProgressFn& progress = {},
                                                     const std::atomic<bool>* cancel = nullptr) {
    if (reqs.size() != 1) throw Error("this pipeline does not batch requests; pass one at a time");
    return {generate(reqs[0], progress, cancel)};
  }
};

}  // namespace ernie
