// ernie-image bench (--model DIR | --random) [-W 1024 -H 1024] [--steps N] [--cfg S] [--prompt-tokens N]
//                   [--repeat R] [--json] [--load-only] [engine flags]
// Times what `generate` runs: Engine::open and Engine::generate, with the engine's phase times (EngineOptions::
// sync_phases: the device synchronised at the end of each load and phase). --random opens the engine with the
// released sizes and random weights (speed does not depend on their values). The prompt is --prompt-tokens random
// token ids (BOS first), the negative prompt "" as generate's default. One warm-up generate (1 step; kernels,
// cuBLASLt and cuDNN plans, the allocator, and the loads of an offloaded mode) comes first; then --repeat timed
// generates, and each phase's number is the median over them. The loads (te_load_s, dit_load_s, vae_load_s,
// cuda_init_s) are those of open and the warm-up: what a fresh `generate` process pays. With --model, load_gib is
// what the loads read from the model's tensors and load_gbps that per second of load_s (the issue's "GB/s from
// page cache" when the file was read once before); load_device_gib is what they placed on the GPU. peak_gib is the
// device's peak through open and the warm-up (a `generate` process's). --load-only stops after the warm-up, which
// is then one step at 16x16 (the loads of any size, in seconds on a CPU).
// --lora FILE[:SCALE] (repeatable) merges adapters into the DiT as it loads (dit_load_s includes the merge);
// --lora-switch also switches to no LoRA and back, as a server does for another LoRA set: lora_switch_s is the
// switch back, which on CUDA uploads the stored weights from the engine's pinned host cache (pinned_base_gib).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/init_image.h"
#include "engine/lora_library.h"
#include "engine/options.h"
#include "engine_flags.h"

namespace ernie::cli {
namespace {

struct Opts {
  EngineOptions engine;
  bool random = false, json = false, load_only = false, lora_switch = false;
  std::vector<std::string> loras;  // --lora FILE[:SCALE]
  int width = 1024, height = 1024, steps = 8, prompt_tokens = 200, repeat = 3;
  float strength = 0;  // > 0: img2img (--strength)
  float cfg = 1.f;
  uint64_t seed = 1;
};

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
constexpr double kGiB = double(size_t(1) << 30);

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The request bench times: --prompt-tokens random ids (BOS first) from the seed, "" as the negative prompt;
// img2img (--strength) from a random image.
GenerateRequest bench_request(const Opts& o) {
  GenerateRequest r;
  r.width = o.width;
  r.height = o.height;
  r.steps = o.steps;
  r.cfg = o.cfg;
  r.seed = o.seed;
  r.prompt = "bench: " + std::to_string(o.prompt_tokens) + " random token ids";
  r.prompt_ids.assign(size_t(o.prompt_tokens), 1);  // BOS, then random_ids() once the vocabulary is known
  std::mt19937_64 g(o.seed + 5);
  if (o.strength > 0) {
    r.strength = o.strength;
    Image img{o.width, o.height, std::vector<uint8_t>(size_t(o.width) * size_t(o.height) * 3), {}};
    for (uint8_t& v : img.rgb) v = uint8_t(g() & 0xff);
    r.init_image = std::move(img);
  }
  for (const std::string& l : o.loras) r.loras.push_back(parse_lora_flag(l));
  return r;
}

int report(const Opts& o, const nlohmann::json& j) {
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s %s %dx%d, %d steps, cfg %.2g, %d prompt tokens\n", j.value("gpu", j["device"].get<std::string>()).c_str(),
                j["dtype"].get<std::string>().c_str(), o.width, o.height, o.steps, double(o.cfg), o.prompt_tokens);
    std::printf("  %-18s %s\n", "offload", j["offload"].get<std::string>().c_str());
    for (const char* k : {"cuda_init_s", "load_s", "load_gib", "dit_load_s", "lora_switch_s", "pinned_base_gib",
                          "load_gbps", "encode_s", "step_s", "denoise_s", "decode_s", "postprocess_s", "total_s",
                          "generate_s", "peak_gib", "te_device_gib", "upload_gbps", "dit_tflops_per_s"})
      if (j.contains(k)) std::printf("  %-18s %.4f\n", k, j[k].get<double>());
  }
  return 0;
}

int run(Opts& o) {
  const bool model = !o.engine.model.empty() || o.engine.files.any();
  ERNIE_CHECK(o.random != model, "bench: give exactly one of --model DIR (or the component files) or --random");
  ERNIE_CHECK(o.width > 0 && o.height > 0 && o.width % 16 == 0 && o.height % 16 == 0, "bench: -W/-H ",
              std::to_string(o.width), "x", std::to_string(o.height), " must be positive multiples of 16");
  ERNIE_CHECK(o.strength == 0 || (o.strength > 0 && o.strength <= 1 && img2img_start_step(o.steps, o.strength) < o.steps),
              "bench: --strength must be in (0, 1] and leave a step to run");
  ERNIE_CHECK(o.steps >= 1 && o.repeat >= 1 && o.prompt_tokens >= 1 && o.cfg >= 0, "bench: steps, repeat and "
              "prompt-tokens must be >= 1 and cfg >= 0");
  ERNIE_CHECK(o.engine.parallel != "cfg" || o.cfg > 1.f, "bench: --parallel cfg splits the two guidance rows: give --cfg > 1");
  ERNIE_CHECK(!o.lora_switch || !o.loras.empty(), "bench: --lora-switch needs --lora");
  GenerateRequest req = bench_request(o);
  EngineOptions e = o.engine;
  e.random_weights = o.random;
  e.random_seed = o.seed;
  e.sync_phases = true;
  e.plan_for = req;
  std::unique_ptr<Engine> engine = Engine::open(e);  // plans for req's prompt length
  const EngineInfo& info = engine->info();
  std::mt19937_64 g(o.seed + 3);
  for (size_t i = 1; i < req.prompt_ids.size(); ++i) req.prompt_ids[i] = int64_t(g() % uint64_t(info.text_vocab));

  nlohmann::json j;
  j["device"] = info.device.str();
  if (info.device.is_cuda()) j["gpu"] = info.device_name;
  j["dtype"] = info.dtype == DType::BF16 ? "bf16" : "f32";
  j["quantize"] = o.engine.quantize.empty() ? "none" : o.engine.quantize;
  j["attention"] = parse_attention_option(o.engine.attention) ? "fp8" : "bf16";
  j["width"] = o.width;
  j["height"] = o.height;
  j["steps"] = o.steps;
  j["cfg"] = o.cfg;
  j["prompt_tokens"] = o.prompt_tokens;
  j["weights"] = o.random ? "random" : o.engine.model;
  j["parallel"] = info.parallel;
  if (!info.parallel_comm.empty()) j["parallel_comm"] = info.parallel_comm;
  if (o.engine.max_vram_gib) j["max_vram_gib"] = *o.engine.max_vram_gib;
  j["estimated_peak_gib"] = double(info.memory.estimate_bytes) / kGiB;
  j["offload"] = offload_name(info.memory.mode);
  const GenerateRequest resolved = engine->resolve(req);
  j["loras"] = int(resolved.loras.size());
  if (!resolved.loras.empty())
    j["lora_apply_mode"] = parse_lora_apply_option(o.engine.lora_apply) ? "at_runtime" : "immediately";

  // ---- the warm-up generate: with an offloaded mode it loads the components, as a fresh generate does ----
  GenerateRequest warm = req;
  if (o.strength == 0) warm.steps = 1;
  if (o.load_only) {  // only its loads count: one step at 16x16 loads what one at 1024x1024 does
    warm.width = warm.height = 16;
    warm.steps = 1;
    warm.strength = GenerateRequest{}.strength;
    warm.init_image.reset();
  }
  const GenerateResult w = engine->generate(warm);
  const LoadTimes& a = info.loads;
  const LoadTimes& b = w.loads;
  j["cuda_init_s"] = a.cuda_init_s;
  j["te_load_s"] = a.text_encoder_s + b.text_encoder_s;
  j["te_device_gib"] = double(a.text_encoder_bytes + b.text_encoder_bytes) / kGiB;
  j["dit_load_s"] = a.denoiser_s + b.denoiser_s;
  j["dit_device_gib"] = double(a.denoiser_bytes + b.denoiser_bytes) / kGiB;
  j["vae_load_s"] = a.vae_s + b.vae_s;
  j["load_s"] = a.total_s() + b.total_s();
  if (!o.random) {
    j["load_gib"] = double(a.read_bytes + b.read_bytes) / kGiB;
    j["load_gbps"] = double(a.read_bytes + b.read_bytes) / 1e9 / j["load_s"].get<double>();
  }
  DeviceMemory mem = engine->device_memory();
  if (info.device.is_cuda()) {
    j["load_device_gib"] = double(a.device_bytes + b.device_bytes) / kGiB;
    j["peak_gib"] = double(mem.peak_reserved) / kGiB;
    j["peak_in_use_gib"] = double(mem.peak_in_use) / kGiB;
  }
  if (mem.streamed_bytes) {
    j["streamed_gib"] = double(mem.streamed_bytes) / kGiB;
    j["upload_gbps"] = engine->measure_upload_gbps();  // pinned host -> device, nothing else running
    j["streamed_gb_per_step"] = double(mem.streamed_bytes) / 1e9;
  }
  if (o.load_only) return report(o, j);

  // ---- --lora-switch: to no LoRA and back (the switch back is timed) ----
  if (o.lora_switch) {
    GenerateRequest none = warm;
    none.loras.clear();
    engine->generate(none);
  }

  // ---- the timed generates ----
  std::vector<double> enc, vae_enc, den, enq, dec, post, gen;
  for (int r = 0; r < o.repeat; ++r) {
    const auto t0 = Clock::now();
    const GenerateResult g = engine->generate(req);
    gen.push_back(since(t0));
    if (r == 0 && o.lora_switch) {
      j["lora_switch_s"] = g.lora_switch_s;
      j["pinned_base_gib"] = double(engine->device_memory().pinned_base_bytes) / kGiB;
    }
    enc.push_back(g.encode_s);
    vae_enc.push_back(g.vae_encode_s);
    den.push_back(g.denoise_s);
    enq.push_back(g.denoise_enqueue_s);
    dec.push_back(g.decode_s - g.postprocess_s);
    post.push_back(g.postprocess_s);
  }
  const int run_steps = o.strength > 0 ? o.steps - img2img_start_step(o.steps, o.strength) : o.steps;
  if (o.strength > 0) {
    j["strength"] = o.strength;
    j["img2img_steps"] = run_steps;
    j["vae_encode_s"] = median(vae_enc);
  }
  j["encode_s"] = median(enc);
  j["denoise_enqueue_s"] = median(enq);
  const double denoise_s = median(den);
  j["denoise_s"] = denoise_s;
  j["denoise_runs_s"] = den;
  j["step_s"] = denoise_s / run_steps;
  j["decode_s"] = median(dec);  // the VAE decode (de-normalise, unpatchify, decode)
  j["postprocess_s"] = median(post);
  j["total_s"] = j["encode_s"].get<double>() + j.value("vae_encode_s", 0.0) + denoise_s + j["decode_s"].get<double>();
  j["generate_s"] = median(gen);  // the whole Engine::generate call, as a front end waits for it

  const int rows = o.cfg > 1.f ? 2 : 1, sf = engine->scale_factor();
  const auto [gemm, attn] = engine->dit_flops(int64_t(o.height / sf) * (o.width / sf) + o.prompt_tokens, rows);
  j["dit_gemm_tflop"] = gemm / 1e12;
  j["dit_attention_tflop"] = attn / 1e12;
  j["dit_tflops_per_s"] = (gemm + attn) / (denoise_s / run_steps) / 1e12;
  j["fraction_of_789_tflops"] = (gemm + attn) / (denoise_s / run_steps) / 789e12;
  return report(o, j);
}

Register reg(60, [](CLI::App& app) {
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("bench", "Time what generate runs (open, load, encode, denoise steps, decode) and GPU "
                               "memory, through the engine");
  add_model_flag(*c, o->engine, false);
  c->add_flag("--random", o->random, "released sizes with random weights (no files needed)");
  c->add_option("-W,--width", o->width, "image width (default 1024)");
  c->add_option("-H,--height", o->height, "image height (default 1024)");
  c->add_option("--steps", o->steps, "denoising steps (default 8)");
  c->add_option("--cfg", o->cfg, "guidance scale; > 1 batches the negative prompt (default 1)");
  c->add_option("--prompt-tokens", o->prompt_tokens, "prompt length in tokens (default 200)");
  c->add_option("--repeat", o->repeat, "timed runs after the warm-up; the median is reported (default 3)");
  c->add_option("--seed", o->seed, "seed of the random weights and inputs");
  c->add_flag("--json", o->json, "print the result as JSON");
  c->add_flag("--load-only", o->load_only, "stop after the loads and the warm-up: load_s, load_gib (bytes read from "
              "the model), load_gbps");
  c->add_option("--strength", o->strength, "img2img: time the VAE encode of a random image and the steps from "
                                          "t_start on, as generate -i at this strength (0, 1] runs them");
  c->add_option("--lora", o->loras, "a LoRA to merge into the DiT as it loads, FILE or FILE:SCALE; repeat to stack");
  c->add_flag("--lora-switch", o->lora_switch, "also time a switch to no LoRA and back (a server's switch to "
              "another LoRA set): lora_switch_s");
  add_engine_flags(*c, o->engine);
  return std::function<int()>([o] { return run(*o); });
});

}  // namespace
}  // namespace ernie::cli
