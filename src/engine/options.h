// What a front end asks the engine for: one EngineOptions, filled from the shared engine flags (the CLI's
// add_engine_flags, the C API's ernie_options / ernie_memory_options), validated and planned by Engine::open.
#pragma once
#include <functional>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "core/tensor.h"
#include "engine/request.h"
#include "io/component_files.h"

namespace ernie {

// none: everything resident. text-encoder: the prompt enhancer and the text encoder are on the device only
// while used, the denoiser loads after them. blocks: that, and the DiT blocks stream from pinned host memory.
enum class Offload { None, TextEncoder, Blocks };
const char* offload_name(Offload o);          // "none", "text-encoder", "blocks"
Offload parse_offload(const std::string& s);  // throws naming --offload and the choices

// VAE decode tiling (models/vae_tiling.h): Auto tiles only when the untiled decode would not fit in the
// device's free memory (never on the CPU); On always tiles; Off never does.
enum class VaeTilingMode { Auto, On, Off };

// The prompt enhancer (pe/): not loaded, loaded when the model has one (serve), or required (generate --pe).
enum class PeLoad { Off, IfPresent, Required };

struct EngineOptions {
  std::string model;  // a model folder (diffusers layout) or a converted single file
  ComponentFiles files;  // each replaces that component of `model`

  // ---- the engine flags, one default each (docs/cli.md) ----
  std::string device = "auto";  // auto (the first CUDA GPU when the build has CUDA and one is visible, else
                                // cpu), cpu, cuda, cuda:N
  std::string dtype;            // activations: f32 or bf16; "" = the device's (f32 on the CPU, bf16 on CUDA)
  int threads = 0;              // CPU threads, 0 = all cores
  // The DiT's linear weights that QuantPolicy picks are quantized at load (fp8 runs W8A8 on fp8 tensor cores,
  // int8 W8A16), and the text encoder's projections to int8; a converted 8-bit file is used as stored.
  std::string quantize = "none";  // none, fp8, int8
  std::string attention = "bf16";  // bf16, or fp8: the DiT's fp8 blocks run attention in fp8 too (Hopper)
  std::optional<std::string> offload;   // none, text-encoder, blocks; unset: --max-vram's choice or default_offload
  std::optional<double> max_vram_gib;   // the least offloading whose estimate fits, and the allocator capped there
  VaeTilingMode vae_tiling = VaeTilingMode::Auto;
  int vae_tile = 0;  // tile side in image pixels (a multiple of the VAE's 8); 0 = the largest that fits
  // How LoRAs apply to 8-bit DiT weights (stable-diffusion.cpp's --lora-apply-mode): immediately merges them
  // before quantizing; at_runtime keeps the exact 8-bit base and runs each adapter beside it as a low-rank side
  // GEMM. auto = immediately (faster, measured in bench/BENCHMARKS.md). Float weights always merge.
  std::string lora_apply = "auto";
  std::string lora_dir;  // where LoRAs named by requests and prompt tags are (engine/lora_library.h); "" = none
  // Several GPUs in one host (engine/parallel/parallel_plan.h): the CUDA devices, one rank each ("0,1"; "" = the one
  // --device), and the mode: none, cfg (the unconditional and conditional rows on two ranks), ulysses (each DiT
  // forward split over the ranks' tokens), data (one engine per rank, a batch split over them), auto (cfg with two
  // GPUs).
  std::string gpus;
  std::string parallel = "none";

  // ---- what the front end is ----
  // The mode when neither offload nor max_vram_gib is given. One-shot front ends (generate, bench) free the
  // text encoder before the DiT loads; long-running ones (serve, the C API) keep everything resident.
  Offload default_offload = Offload::TextEncoder;
  PeLoad pe = PeLoad::Off;
  // The request memory is planned for (generate: the one it runs); unset: one image at the model's default
  // size and guidance with the longest prompt the tokenizer keeps (serve, the C API).
  std::optional<GenerateRequest> plan_for;

  // ---- for tools and tests ----
  bool load_denoiser = true;     // false: tokenizer and text encoder only (encode_prompt); generate() throws
  bool round_timesteps = true;   // feed the DiT bf16-rounded timesteps in bf16, as the reference does
  // Benchmarks (bench --random): no weights are read; every component gets deterministic random weights (the
  // DiT from random_seed, the text encoder from random_seed + 10, the VAE from + 20) of `model`'s configs, or,
  // with `model` empty, of the released sizes with no tokenizer (requests then give prompt_ids, and plan_for).
  // No component files, no prompt enhancer.
  bool random_weights = false;
  uint64_t random_seed = 1;
  // Benchmarks: the device is synchronised at the end of each load and phase, so each time
  // (GenerateResult::encode_s ..., LoadTimes) is that phase's own work, not queued work of the one before.
  bool sync_phases = false;
  // Checking the parallel split on one device: that many ranks in this process on --device (a LocalCommunicator,
  // ops/collectives/local_communicator.h) instead of one per GPU; they share the loaded weights. 0 = off.
  int parallel_local = 0;
  // Calibration (convert/calibration.h): sees the float input of every DiT block linear in every step, under
  // the weight's checkpoint name (ErnieDit::set_input_observer).
  std::function<void(const std::string& weight, const Tensor& x)> observe_dit_inputs;
};

// The flags' values as the engine uses them; each throws an Error naming the flag and the choices.
Device parse_device_option(const std::string& s);                  // "auto" asks ops::cuda_device_count
DType parse_dtype_option(const std::string& s, Device device);     // "" = the device's default
std::optional<DType> parse_quantize_option(const std::string& s);  // fp8 -> F8_E4M3, int8 -> I8, none/"" -> none
bool parse_attention_option(const std::string& s);                 // fp8 -> true, bf16/"" -> false
bool parse_lora_apply_option(const std::string& s);                // at_runtime -> true; auto/immediately/"" -> false

}  // namespace ernie
