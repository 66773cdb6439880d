#include "engine_flags.h"

namespace ernie::cli {

void add_model_flag(CLI::App& cmd, EngineOptions& o, bool required) {
  // Not CLI11-required, whatever `required` says: --diffusion-model, --text-encoder, --vae and --tokenizer
  // together stand in for it, and the engine names what is missing.
  (void)required;
  cmd.add_option("--model,-m", o.model,
                 "model folder (diffusers layout) or a converted file; may be left out when --diffusion-model, "
                 "--text-encoder, --vae and --tokenizer are all given");
  add_component_flags(cmd, o.files);
}

void add_component_flags(CLI::App& cmd, ComponentFiles& f) {
  cmd.add_option("--diffusion-model", f.diffusion_model,
                 "the DiT from its own file, replacing --model's: safetensors or GGUF, diffusers or ComfyUI names");
  cmd.add_option("--text-encoder,--llm", f.text_encoder,
                 "the text encoder from its own file, replacing --model's: safetensors with HF names under 'model.' "
                 "(Comfy-Org's ministral-3-3b), the diffusers text_encoder's, or a llama.cpp LLM GGUF");
  cmd.add_option("--vae", f.vae,
                 "the VAE from its own file, replacing --model's: safetensors in the diffusers or the original "
                 "BFL/LDM layout (Comfy-Org's flux2_ae)");
  cmd.add_option("--tokenizer", f.tokenizer,
                 "the tokenizer from its tokenizer.json file (a tokenizer_config.json beside it is read too) or "
                 "from a llama.cpp GGUF's tokenizer.ggml.*, replacing --model's");
}

void add_engine_flags(CLI::App& cmd, EngineOptions& o, const std::string& default_offload_why) {
  cmd.add_option("--device", o.device,
                 "auto (default: the first CUDA GPU when this build has CUDA and one is visible, else cpu), cpu, "
                 "cuda or cuda:N");
  cmd.add_option("--dtype", o.dtype, "activations: f32 or bf16 (default: f32 on the CPU, which computes in f32 only; "
                                     "bf16 on CUDA)");
  cmd.add_option("--quantize", o.quantize,
                 "none (default), fp8 or int8: the DiT's linear weights quantized at load (fp8: W8A8 on fp8 tensor "
                 "cores; int8: weight-only; first/last blocks stay bf16) and the text encoder's projections to int8 "
                 "(weight-only); a converted 8-bit file is used as stored");
  cmd.add_option("--attention", o.attention, "bf16 (default) or fp8: the fp8 DiT blocks run attention on the fp8 "
                                             "tensor cores too (Hopper; q, k, P and v in e4m3)");
  cmd.add_option("--lora-apply-mode", o.lora_apply,
                 "how LoRAs apply to 8-bit DiT weights: auto (default: immediately), immediately (merged, then "
                 "quantized) or at_runtime (the exact 8-bit base plus a low-rank side GEMM)");
  cmd.add_option("--threads,-t", o.threads, "CPU threads (default 0: all cores)");
  const std::string def = offload_name(o.default_offload);
  cmd.add_option_function<std::string>(
      "--offload", [&o](const std::string& v) { o.offload = v; },
      "low-VRAM mode: none (every component resident), text-encoder (the prompt enhancer and text encoder are on "
      "the device only while used, the DiT loads after them), blocks (that, and the DiT blocks stream from pinned "
      "host memory each step; CUDA only). Default " + def + (default_offload_why.empty() ? "" : ": " + default_offload_why));
  cmd.add_option_function<double>(
      "--max-vram", [&o](double v) { o.max_vram_gib = v; },
      "GiB of device memory to stay under: picks the least offloading (and VAE tiling) whose estimated peak fits, "
      "and caps the allocator there (CUDA only; not with --offload)");
  cmd.add_flag_function(
      "--vae-tiling", [&o](int64_t) { o.vae_tiling = VaeTilingMode::On; },
      "decode images in tiles (less memory; on CUDA it is automatic when the whole decode would not fit)");
  cmd.add_option("--gpus", o.gpus,
                 "CUDA devices for --parallel, one rank each, e.g. 0,1; the first also runs the text encoder and the "
                 "VAE (default: --device alone; one id: that GPU)");
  cmd.add_option("--parallel", o.parallel,
                 "none (default), cfg (the unconditional and the conditional rows on the two --gpus, each with its own "
                 "copy of the weights, exchanging each step's velocity through NCCL; a request at cfg <= 1 runs on the "
                 "first alone), ulysses (each DiT forward's tokens split over the --gpus, an all-to-all around "
                 "attention; for cfg 1), data (one whole engine per GPU; serve's batches of requests split over them) "
                 "or auto (cfg with two GPUs)");
  cmd.add_option("--parallel-local", o.parallel_local,
                 "checking the split on one device: run --parallel's N ranks as threads on --device, exchanging through "
                 "its memory (same images as without --parallel, not faster)");
  cmd.add_option("--vae-tile", o.vae_tile, "tile side in pixels when tiling, a multiple of the VAE's 8 (default: 512 "
                                           "or less to fit)");
}

}  // namespace ernie::cli
