// ernie-image bench (--model DIR | --random) [-W 1024 -H 1024] [--steps N] [--cfg S] [--prompt-tokens N]
//                   [--repeat R] [--json] [--load-only] [engine flags]
// Times the stages of one generation on the GPU: loading, text encoding, the denoising loop (DiT
// forward per step, CFG rows batched, Euler update) and the VAE decode. --random builds the released
// sizes with random weights (speed does not depend on their values). Each stage is timed after a
// warm-up run, with the device synchronised around it; the numbers are the median over --repeat runs.
// With --model, load_gib is what the loads read from the model's tensors and load_gbps that per second of
// load_s (the "GB/s from page cache" when the file was read once before); load_device_gib is what
// they placed on the GPU. --load-only stops after loading. --lora FILE[:SCALE] (repeatable) merges adapters
// into the DiT as it loads (dit_load_s includes the merge); --lora-switch then also frees that DiT and loads it
// again with the same adapters, as a server does for another LoRA set: lora_switch_s. On CUDA both loads then
// read the stored weights through a pinned host cache, as the engine does (the first load fills it, and its
// dit_load_s includes that copy; pinned_base_gib is its size).
// It times the components one by one (not Engine::generate), each stage with the device synchronised around
// it, and takes the engine flags as every front end does. --vae-tiling also times the tiled decode of the same latents (pipeline/vae_tiling.h, tiling chosen as
// `generate --vae-tiling` does) and compares it with the untiled one: decode_tiled_s, tiled_psnr_db (range
// [-1, 1]), tiled_max_abs, vae_tile_on_device, and on CUDA the device memory each decode takes above what
// was in use before it (decode_extra_gib, decode_tiled_extra_gib); when the activations stayed on the
// device, decode_tiled_host_s and decode_tiled_host_extra_gib time the host-resident variant too.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <functional>
#include <optional>
#include <random>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "engine/init_image.h"
#include "engine/lora_library.h"
#include "engine/memory_plan.h"
#include "engine/options.h"
#include "ops/collectives/communicator.h"
#include "ops/collectives/local_communicator.h"
#include "ops/collectives/nccl_communicator.h"
#include "engine/parallel/parallel_plan.h"
#include "models/vae_tiling.h"
#include "engine_flags.h"
#include "io/model_folder.h"
#include "models/ernie_dit.h"
#include "models/flux2_vae.h"
#include "models/mistral.h"
#include "models/quant_policy.h"
#include "ops/ops.h"

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
  // resolved from the engine flags
  Device device = kCPU;
  DType act = DType::F32;
};

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void sync(Device d) { ops::synchronize(d); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

Tensor random_act(const Shape& s, uint64_t seed, Device d, DType act) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> v(size_t(shape_numel(s)));
  for (float& x : v) x = n(g);
  Tensor t = Tensor::from_vector(v, s).to(d);
  return t.dtype() == act ? t : ops::cast(t, act);
}

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

// Device memory in use (0 on the CPU): its growth over a load is the weights that load placed there.
size_t device_in_use(Device d) { return ops::memory_stats(d).in_use_bytes; }

// FlowMatchEuler sigmas with shift 4 (DESIGN.md), N+1 values ending in 0.
std::vector<float> sigmas(int n) {
  std::vector<float> s;
  for (int i = 0; i < n; ++i) {
    const float u = 1.f - float(i) / float(n);
    s.push_back(4.f * u / (1.f + 3.f * u));
  }
  s.push_back(0.f);
  return s;
}

// FLOPs of one DiT forward over `rows` batch rows of S tokens (GEMMs, attention).
std::pair<double, double> dit_flops(const DitConfig& c, int64_t S, int rows) {
  const double H = c.hidden_size, F = c.ffn_hidden_size, L = c.num_layers;
  const double gemm = L * (8.0 * S * H * H + 6.0 * S * H * F) * rows;
  const double attn = L * 4.0 * double(S) * double(S) * H * rows;
  return {gemm, attn};
}

// Peak device memory in use while fn runs, above what was in use before it, in GiB (0 on the CPU).
double extra_gib(Device dev, const std::function<void()>& fn) {
  if (!dev.is_cuda()) {
    fn();
    return 0;
  }
  sync(dev);
  const size_t before = ops::memory_stats(dev).in_use_bytes;
  ops::reset_peak_memory(dev);
  fn();
  sync(dev);
  return double(ops::memory_stats(dev).peak_in_use_bytes - before) / double(1ull << 30);
}

// The tiled decode of z against the untiled one: time (median of --repeat after a warm-up), PSNR and max
// abs difference on [-1, 1], and the device memory each decode takes.
void bench_tiled_decode(const Opts& o, const Flux2Vae& vae, const Tensor& z, nlohmann::json& j) {
  const int s = vae.config().spatial_scale();
  const int tile_px = o.engine.vae_tile;
  ERNIE_CHECK(tile_px >= 0 && tile_px % s == 0, "bench: --vae-tile ", std::to_string(tile_px),
              " must be a multiple of ", std::to_string(s));
  const Device dev = z.device();
  VaeTiling t;
  if (dev.is_cuda())
    t = *auto_vae_tiling(vae.config(), z.dim(2), z.dim(3), vae.act_dtype(), ops::available_bytes(dev), true);
  if (tile_px > 0) t.tile = tile_px / s;
  std::vector<float> ref;
  auto untiled = [&] { ref = vae.decode(z).to_vector(); };
  auto timed = [&](const VaeTiling& tt, Tensor& img) {
    std::vector<double> runs;
    for (int r = 0; r < o.repeat; ++r) {
      auto t0 = Clock::now();
      img = vae_decode_tiled(vae, z, tt);
      sync(dev);
      runs.push_back(since(t0));
    }
    return median(runs);
  };
  j["decode_extra_gib"] = extra_gib(dev, untiled);
  // also the warm-up: the tile shapes' plans
  j["decode_tiled_extra_gib"] = extra_gib(dev, [&] { vae_decode_tiled(vae, z, t); });
  if (t.on_device) {
    VaeTiling host = t;
    host.on_device = false;
    j["decode_tiled_host_extra_gib"] = extra_gib(dev, [&] { vae_decode_tiled(vae, z, host); });
    Tensor unused;
    j["decode_tiled_host_s"] = timed(host, unused);
  }
  Tensor img;
  j["decode_tiled_s"] = timed(t, img);
  const std::vector<float> v = img.to_vector();
  double mse = 0, mx = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const double d = double(v[i]) - double(ref[i]);
    mse += d * d;
    mx = std::max(mx, std::fabs(d));
  }
  mse /= double(std::max<size_t>(1, v.size()));
  j["tiled_psnr_db"] = mse > 0 ? 10 * std::log10(4.0 / mse) : 999.0;
  j["tiled_max_abs"] = mx;
  j["vae_tile_px"] = t.tile * s;
  j["vae_tile_halo"] = t.halo;
  j["vae_tile_on_device"] = t.on_device;
}

int report(const Opts& o, const nlohmann::json& j) {
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s %s %dx%d, %d steps, cfg %.2g, %d prompt tokens\n", j.value("gpu", o.device.str()).c_str(),
                j["dtype"].get<std::string>().c_str(), o.width, o.height, o.steps, double(o.cfg), o.prompt_tokens);
    std::printf("  %-18s %s\n", "offload", j["offload"].get<std::string>().c_str());
    for (const char* k : {"load_s", "load_gib", "dit_load_s", "lora_switch_s", "pinned_base_gib", "load_gbps", "encode_s", "step_s", "denoise_s", "decode_s", "total_s",
                          "peak_gib", "te_device_gib", "upload_gbps", "dit_tflops_per_s", "decode_tiled_s", "tiled_psnr_db", "tiled_max_abs", "decode_extra_gib",
                          "decode_tiled_extra_gib", "decode_tiled_host_s"})
      if (j.contains(k)) std::printf("  %-18s %.4f\n", k, j[k].get<double>());
  }
  return 0;
}

int run(Opts& o) {
  const bool model = !o.engine.model.empty() || o.engine.files.any();
  ERNIE_CHECK(o.random != model, "bench: give exactly one of --model DIR (or the component files) or --random");
  ERNIE_CHECK(o.width > 0 && o.height > 0 && o.width % 16 == 0 && o.height % 16 == 0, "bench: -W/-H ", std::to_string(o.width), "x",
              std::to_string(o.height), " must be positive multiples of 16");
  ERNIE_CHECK(o.strength == 0 || (o.strength > 0 && o.strength <= 1 && img2img_start_step(o.steps, o.strength) < o.steps),
              "bench: --strength must be in (0, 1] and leave a step to run");
  ERNIE_CHECK(o.steps >= 1 && o.repeat >= 1 && o.prompt_tokens >= 1 && o.cfg >= 0, "bench: steps, repeat and "
              "prompt-tokens must be >= 1 and cfg >= 0");
  Device planned = kCPU;  // --gpus: the first GPU
  const ParallelPlan plan = plan_parallel(o.engine.gpus, o.engine.parallel, o.engine.parallel_local, o.engine.device,
                                          ops::cuda_device_count(), nccl_built(), planned);
  ERNIE_CHECK(!plan.split() || plan.mode != ParallelMode::Cfg || o.cfg > 1.f,
              "bench: --parallel cfg splits the two guidance rows: give --cfg > 1");
  const Device dev = o.device = o.engine.gpus.empty() ? parse_device_option(o.engine.device) : planned;
  ERNIE_CHECK(dev.is_cpu() || ops::cuda_device_count() > dev.index, "bench: no CUDA device ", dev.str());
  const DType act = o.act = parse_dtype_option(o.engine.dtype, dev);
  ERNIE_CHECK(!dev.is_cpu() || act == DType::F32, "bench: the CPU computes in f32 (--dtype f32)");
  ERNIE_CHECK(o.engine.threads >= 0, "--threads ", std::to_string(o.engine.threads), " must not be negative");
  if (dev.is_cpu()) ops::set_threads(o.engine.threads);
  const MemoryFlags mem{o.engine.offload, o.engine.max_vram_gib};
  check_memory_flags(mem, dev);

  nlohmann::json j;
  j["device"] = dev.str();
  if (dev.is_cuda()) j["gpu"] = ops::device_name(dev);
  j["dtype"] = act == DType::BF16 ? "bf16" : "f32";
  const std::optional<DType> quantize = parse_quantize_option(o.engine.quantize);
  const std::optional<DType> te_quantize = QuantPolicy{}.text_encoder_quantization(quantize);
  j["quantize"] = quantize ? o.engine.quantize : "none";
  const bool lora_at_runtime = parse_lora_apply_option(o.engine.lora_apply);
  const bool attention_fp8 = parse_attention_option(o.engine.attention);
  j["attention"] = attention_fp8 ? "fp8" : "bf16";
  j["width"] = o.width;
  j["height"] = o.height;
  j["steps"] = o.steps;
  j["cfg"] = o.cfg;
  j["prompt_tokens"] = o.prompt_tokens;
  j["weights"] = o.random ? "random" : o.engine.model;
  j["parallel"] = parallel_mode_name(plan.split() ? plan.mode : ParallelMode::None);
  if (plan.split()) j["parallel_comm"] = plan.local_ranks ? "local" : "nccl";

  // ---- low-VRAM mode: as given, or the least offloading whose estimate fits --max-vram ----
  const int rows = o.cfg > 1.f ? 2 : 1;
  const int64_t T = o.prompt_tokens, h = o.height / 16, w = o.width / 16;
  std::optional<ModelFolder> folder;
  if (!o.random) folder = ModelFolder::open(o.engine.model, false, o.engine.files);
  Offload mode = mem.offload ? parse_offload(*mem.offload) : o.engine.default_offload;
  {
    const ModelShapes shapes = o.random ? ModelShapes{} : model_shapes(*folder, false);
    GenerationShape g;
    g.width = o.width;
    g.height = o.height;
    g.rows = rows;
    g.text_tokens = o.prompt_tokens;
    g.act = act;
    set_8bit_weights(g, folder ? &*folder : nullptr, quantize);
    const MemoryEstimate e = estimate_memory(shapes, g);
    if (mem.max_vram_gib) {
      const size_t limit = size_t(*mem.max_vram_gib * double(size_t(1) << 30));
      mode = plan_offload(e, limit);
      ops::set_memory_limit(dev, limit);
      j["max_vram_gib"] = *mem.max_vram_gib;
    }
    j["estimated_peak_gib"] = double(e.peak(mode)) / double(size_t(1) << 30);
  }
  j["offload"] = offload_name(mode);

  // ---- text encoder: load, encode (prompt, and the empty negative prompt when cfg > 1), free unless
  // --offload none ----
  Tensor text;
  std::optional<MistralModel> lm;
  std::optional<TextEncoder> te;
  size_t device_bytes = 0;
  Tensor::zeros({1}, DType::F32, dev);  // the device context is up before any load is timed
  sync(dev);
  {
    const size_t in_use = device_in_use(dev);
    auto t0 = Clock::now();
    std::function<Tensor(const std::vector<int64_t>&)> encode;
    int64_t vocab = 0;
    if (o.random) {
      const MistralConfig mc{};
      lm.emplace(MistralModel::random(mc, dev, act, o.seed + 10, false, te_quantize));
      vocab = mc.vocab_size;
      const int layers = mc.num_hidden_layers - 1;  // hidden_states[-2]
      encode = [&lm, layers](const std::vector<int64_t>& ids) { return lm->forward(ids, layers); };
    } else {
      te.emplace(TextEncoder::load(*folder, dev, act, te_quantize));
      vocab = te->config().vocab_size;
      encode = [&te](const std::vector<int64_t>& ids) { return te->encode(ids); };
    }
    sync(dev);
    j["te_load_s"] = since(t0);
    j["te_device_gib"] = double(lm ? lm->weight_bytes() : te->weight_bytes()) / double(size_t(1) << 30);
    device_bytes += device_in_use(dev) - in_use;
    if (!o.load_only) {
      std::mt19937_64 g(o.seed + 3);
      std::vector<int64_t> ids(static_cast<size_t>(T));
      ids[0] = 1;  // BOS
      for (size_t i = 1; i < ids.size(); ++i) ids[i] = int64_t(g() % uint64_t(vocab));
      const std::vector<int64_t> negative = {1};
      auto run_encode = [&] {
        Tensor cond = encode(ids);
        if (rows == 2) encode(negative);  // timed; its features are not needed for speed
        return cond;
      };
      run_encode();  // warm-up
      sync(dev);
      std::vector<double> enc;
      Tensor cond;
      for (int r = 0; r < o.repeat; ++r) {
        auto t = Clock::now();
        cond = run_encode();
        sync(dev);
        enc.push_back(since(t));
      }
      j["encode_s"] = median(enc);
      Tensor c3 = cond.reshape({1, T, cond.dim(1)});
      text = rows == 2 ? ops::concat({c3, c3}, 0) : c3;
    }
  }
  if (mode != Offload::None) {  // the text encoder is freed here, as the CLI does
    lm.reset();
    te.reset();
    ops::release_cached_memory(dev);
  }
  std::vector<int64_t> lens(size_t(rows), T);
  if (rows == 2) lens[1] = 1;  // the negative prompt: BOS only

  // ---- DiT and VAE: load ----
  size_t in_use = device_in_use(dev);
  auto t0 = Clock::now();
  const DitConfig cfg = o.random ? DitConfig{} : folder->dit;
  const bool stream = mode == Offload::Blocks;
  std::vector<LoraRef> refs;
  for (const std::string& l : o.loras) refs.push_back(parse_lora_flag(l));
  LoraLibrary library("", cfg);
  const LoraSet loras = library.set(library.resolve(refs, ""));  // read (and checked) before the timing
  j["loras"] = int(loras.size());
  if (!loras.empty()) j["lora_apply_mode"] = lora_at_runtime ? "at_runtime" : "immediately";
  // --lora-switch on CUDA: the stored weights are read through a pinned host cache, as the engine does when it
  // may switch; the first load fills it (dit_load_s includes that copy), the switch uploads from it.
  std::optional<HostWeightCache> base_weights;
  if (o.lora_switch && dev.is_cuda() && !stream && !o.random) base_weights.emplace(dev, HostWeightCache::default_budget());
  auto load_dit = [&] {
    return o.random ? ErnieDit::random(cfg, dev, act, o.seed, stream, quantize, QuantPolicy{}, loras, lora_at_runtime)
                    : ErnieDit::load(*folder, dev, act, stream, quantize, QuantPolicy{}, loras,
                                     lora_at_runtime, base_weights ? &*base_weights : nullptr);
  };
  t0 = Clock::now();
  std::optional<ErnieDit> dit_slot(load_dit());
  sync(dev);
  j["dit_load_s"] = since(t0);
  if (o.lora_switch) {  // what a server does for another LoRA set: free the DiT, load it again with its set
    t0 = Clock::now();
    dit_slot.reset();
    ops::release_cached_memory(dev);
    dit_slot.emplace(load_dit());
    sync(dev);
    j["lora_switch_s"] = since(t0);
    if (base_weights) j["pinned_base_gib"] = double(base_weights->bytes()) / double(size_t(1) << 30);
  }
  ErnieDit& dit = *dit_slot;
  // --parallel cfg: the other GPUs' copies (NCCL), loaded after the timed load; local ranks share `dit`.
  std::vector<std::optional<ErnieDit>> rank_dits(plan.gpus.empty() ? 0 : plan.gpus.size() - 1);
  for (size_t r = 0; r < rank_dits.size(); ++r) {
    const Device d{DeviceKind::CUDA, plan.gpus[r + 1]};
    rank_dits[r].emplace(o.random ? ErnieDit::random(cfg, d, act, o.seed, stream, quantize, QuantPolicy{}, loras,
                                                     lora_at_runtime)
                                  : ErnieDit::load(*folder, d, act, stream, quantize, QuantPolicy{}, loras,
                                                   lora_at_runtime));
    rank_dits[r]->set_attention_fp8(attention_fp8);
  }
  std::unique_ptr<CommGroup> group;
  if (plan.split()) group = plan.local_ranks ? make_local_group(plan.local_ranks, dev) : make_nccl_group(plan.gpus);
  device_bytes += device_in_use(dev) - in_use;
  dit.set_attention_fp8(attention_fp8);
  j["dit_device_gib"] = double(dit.weight_bytes()) / double(size_t(1) << 30);
  if (BlockStreamer* bs = dit.block_streamer()) {
    j["streamed_gib"] = double(bs->host_bytes()) / double(size_t(1) << 30);
    j["upload_gbps"] = bs->measure_upload_gbps();  // pinned host -> device, nothing else running
    j["streamed_gb_per_step"] = double(bs->host_bytes()) / 1e9;
  }
  in_use = device_in_use(dev);
  t0 = Clock::now();
  Flux2Vae vae = o.random ? Flux2Vae::random(VaeConfig{}, dev, act, o.seed + 20) : Flux2Vae::load(*folder, dev, act);
  sync(dev);
  j["vae_load_s"] = since(t0);
  device_bytes += device_in_use(dev) - in_use;
  j["load_s"] = j["te_load_s"].get<double>() + j["dit_load_s"].get<double>() + j["vae_load_s"].get<double>();
  // The load speed: bytes the loads read from the model (the text encoder's unused last layer and final
  // norm left out) per second of load_s; with the file in the page cache this is the engine's own speed.
  if (!o.random) {
    const std::string last = "layers." + std::to_string(folder->text_encoder.num_hidden_layers - 1) + ".";
    const size_t read = read_bytes(folder->transformer_c) + read_bytes(folder->text_encoder_c, {last, "norm."}) +
                        read_bytes(folder->vae_c);
    j["load_gib"] = double(read) / double(size_t(1) << 30);
    j["load_gbps"] = double(read) / 1e9 / j["load_s"].get<double>();
  }
  if (dev.is_cuda()) j["load_device_gib"] = double(device_bytes) / double(size_t(1) << 30);
  if (o.load_only) return report(o, j);

  // ---- denoising loop ----
  const std::vector<float> sig = sigmas(o.steps);
  const Tensor x0 = random_act({1, cfg.in_channels, h, w}, o.seed + 2, dev, act);  // drawn outside the timing
  // img2img (--strength): the steps from t_start on, after a timed VAE encode of a random image.
  const int first = o.strength > 0 ? img2img_start_step(o.steps, o.strength) : 0, run_steps = o.steps - first;
  if (o.strength > 0) {
    j["strength"] = o.strength;
    j["img2img_steps"] = run_steps;
    const Tensor image = random_act({1, 3, o.height, o.width}, o.seed + 5, dev, act);
    auto encode_image = [&] { return vae.patchify_and_normalize(vae.encode(image).first); };
    encode_image();  // warm-up: cuDNN plans
    sync(dev);
    std::vector<double> e;
    for (int r = 0; r < o.repeat; ++r) {
      ops::release_cached_memory(dev);
      auto t = Clock::now();
      encode_image();
      sync(dev);
      e.push_back(since(t));
    }
    j["vae_encode_s"] = median(e);
  }
  // --parallel cfg: each rank its row through its DiT, the velocities all-gathered, the same combine and step on
  // every rank (as sample_cfg's split); --parallel ulysses: every row on every rank, each forward split over the
  // ranks' tokens. Rank 0's latents are the result.
  auto denoise_split = [&](int steps) {
    Tensor result;
    sync(dev);  // x0 and the text are complete before another GPU's stream copies them
    run_ranks(*group, [&](Communicator& c) {
      const ErnieDit& d = c.rank() == 0 || rank_dits.empty() ? dit : *rank_dits[size_t(c.rank() - 1)];
      const bool seq = plan.mode == ParallelMode::Ulysses;
      const Tensor my_text = seq ? text.to(c.device()) : text.narrow(c.rank(), 1).to(c.device());
      const std::vector<int64_t> my_lens = seq ? lens : std::vector<int64_t>{lens[size_t(c.rank())]};
      Tensor x = x0.to(c.device());
      for (int i = first; i < first + steps; ++i) {
        const float t = sig[size_t(i)] * 1000.f;
        Tensor v;
        if (seq) {
          v = d.forward_seq_parallel(c, rows == 2 ? ops::concat({x, x}, 0) : x, std::vector<float>(size_t(rows), t),
                                     my_text, my_lens);
        } else {
          const Tensor mine = d.forward(x, {t}, my_text, my_lens);
          Shape both_shape = mine.shape();
          both_shape[0] = 2;
          v = Tensor::empty(both_shape, mine.dtype(), c.device());
          c.all_gather(mine, v);
        }
        if (rows == 2) {
          Tensor cond = ops::slice(v, 0, 0, 1), uncond = ops::slice(v, 0, 1, 1);
          v = ops::add(uncond, ops::scale(ops::add(cond, ops::scale(uncond, -1.f)), o.cfg));
        }
        x = ops::add(x, ops::scale(v, sig[size_t(i) + 1] - sig[size_t(i)]));
      }
      if (c.rank() == 0) result = x;
    });
    return result;
  };
  auto denoise = [&](int steps) {
    if (group) return denoise_split(steps);
    Tensor x = x0;
    for (int i = first; i < first + steps; ++i) {
      const float t = sig[size_t(i)] * 1000.f;
      Tensor xin = rows == 2 ? ops::concat({x, x}, 0) : x;
      Tensor v = dit.forward(xin, std::vector<float>(size_t(rows), t), text, lens);
      if (rows == 2) {  // uncond + s * (cond - uncond)
        Tensor cond = ops::slice(v, 0, 0, 1), uncond = ops::slice(v, 0, 1, 1);
        v = ops::add(uncond, ops::scale(ops::add(cond, ops::scale(uncond, -1.f)), o.cfg));
      }
      x = ops::add(x, ops::scale(v, sig[size_t(i) + 1] - sig[size_t(i)]));
    }
    return x;
  };
  denoise(1);  // warm-up: kernels, cuBLASLt plans, allocator
  sync(dev);
  std::vector<double> den, enq;
  for (int r = 0; r < o.repeat; ++r) {
    ops::release_cached_memory(dev);  // as the pipeline between a generation's decode and the next denoise
    auto t = Clock::now();
    denoise(run_steps);
    enq.push_back(since(t));  // host time to queue the work: close to denoise_s means the host is the limit
    sync(dev);
    den.push_back(since(t));
  }
  j["denoise_enqueue_s"] = median(enq);
  const double denoise_s = median(den);
  j["denoise_s"] = denoise_s;
  j["denoise_runs_s"] = den;
  j["step_s"] = denoise_s / run_steps;

  // ---- VAE decode of the final latents (de-normalise, unpatchify, decode) ----
  const Tensor latents = random_act({1, cfg.out_channels, h, w}, o.seed + 4, dev, act);
  auto decode = [&] { return vae.decode(vae.denormalize_and_unpatchify(latents)); };
  ops::release_cached_memory(dev);
  decode();  // warm-up: cuDNN plans
  sync(dev);
  std::vector<double> dec;
  for (int r = 0; r < o.repeat; ++r) {
    ops::release_cached_memory(dev);  // as the pipeline after the denoising loop
    auto t = Clock::now();
    Tensor img = decode();
    sync(dev);
    dec.push_back(since(t));
  }
  j["decode_s"] = median(dec);
  j["total_s"] = j["encode_s"].get<double>() + j.value("vae_encode_s", 0.0) + denoise_s + j["decode_s"].get<double>();
  if (dev.is_cuda()) {  // before the tiled decode, which resets the peak to measure its own
    const ops::MemoryStats m = ops::memory_stats(dev);
    j["peak_gib"] = double(m.peak_reserved_bytes) / double(1ull << 30);
    j["peak_in_use_gib"] = double(m.peak_in_use_bytes) / double(1ull << 30);
  }
  if (o.engine.vae_tiling == VaeTilingMode::On) bench_tiled_decode(o, vae, vae.denormalize_and_unpatchify(latents), j);

  const auto [gemm, attn] = dit_flops(cfg, h * w + T, rows);
  j["dit_gemm_tflop"] = gemm / 1e12;
  j["dit_attention_tflop"] = attn / 1e12;
  j["dit_tflops_per_s"] = (gemm + attn) / (denoise_s / run_steps) / 1e12;
  j["fraction_of_789_tflops"] = (gemm + attn) / (denoise_s / run_steps) / 789e12;
  return report(o, j);
}

Register reg(60, [](CLI::App& app) {
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("bench", "Time a generation's stages (load, encode, denoise steps, decode) and GPU memory; --vae-tiling also times "
                               "the tiled decode against the untiled one");
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
  c->add_flag("--load-only", o->load_only, "only load the model: load_s, load_gib (bytes read from the model), load_gbps");
  c->add_option("--strength", o->strength, "img2img: time the VAE encode of a random image and the steps from "
                                          "t_start on, as generate -i at this strength (0, 1] runs them");
  c->add_option("--lora", o->loras, "a LoRA to merge into the DiT as it loads, FILE or FILE:SCALE; repeat to stack");
  c->add_flag("--lora-switch", o->lora_switch, "also time freeing the DiT and loading it again with the LoRAs "
              "(a server's switch to another LoRA set): lora_switch_s");
  add_engine_flags(*c, o->engine);
  return std::function<int()>([o] { return run(*o); });
});

}  // namespace
}  // namespace ernie::cli
