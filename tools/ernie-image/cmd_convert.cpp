// ernie-image convert --model DIR -o FILE [--dtype bf16|fp8|int8] [--keep PATTERN]... [--no-pe] [--threads N]
//   [--calibrate PROMPTS.txt [--calibrate-steps N] [--calibrate-size WxH] [--device D] [--act-dtype f32|bf16]]
// ernie-image convert --model DIR -o DIT.gguf --dtype q8_0|q4_k|q5_k|q6_k|bf16|f16|f32 [--keep PATTERN]... [--gguf-arch NAME]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>

#include "commands.h"
#include "core/error.h"
#include "core/file.h"
#include "convert/convert.h"
#include "io/gguf_encode.h"
#include "generate_util.h"
#include "convert/calibration.h"
#include "engine/options.h"
#include "engine_flags.h"

namespace ernie::cli {
namespace {
struct Opts {
  std::string model, out, dtype = "bf16", calibrate, calibrate_size, device = "cpu", act, gguf_arch;
  int calibrate_steps = 0;
  std::vector<std::string> keep;
  bool no_pe = false, quantize_all_blocks = false, keep_text_encoder = false, quiet = false;
  int threads = 0;
  ComponentFiles files;
};
// "convert: NN%" on stderr as bytes are written, each percentage once (nothing with --quiet); finish() ends the line.
struct Progress {
  bool quiet;
  int last = -1;
  void operator()(size_t done, size_t total) {
    const int pct = total ? int(100.0 * double(done) / double(total)) : 100;
    if (quiet || pct == last) return;
    last = pct;
    std::fprintf(stderr, "\rconvert: %3d%%", pct);
    std::fflush(stderr);
  }
  void finish() const {
    if (!quiet) std::fprintf(stderr, "\n");
  }
};

// The DiT alone as a GGUF (convert/convert.h convert_dit_gguf).
int convert_to_gguf(const Opts& o) {
  const int type = ggml_output_type(o.dtype);
  ERNIE_CHECK(type >= 0, "--dtype ", o.dtype, ": a GGUF takes q8_0, q4_k, q5_k, q6_k, bf16, f16 or f32");
  ERNIE_CHECK(o.calibrate.empty(), "--calibrate: static activation scales are for fp8 safetensors files, not GGUF");
  ModelFolder m = ModelFolder::open(o.model, false, o.files);
  QuantPolicy policy;
  for (auto& k : o.keep) policy.keep.push_back(k);
  policy.keep_first_last_dit_blocks = !o.quantize_all_blocks;
  Progress progress{o.quiet};
  const ConvertStats st =
      convert_dit_gguf(m, o.out, type, policy, o.gguf_arch.empty() ? kDefaultDitGgufArch : o.gguf_arch, std::ref(progress));
  progress.finish();
  std::printf("wrote %s: the DiT, %zu tensors (%zu as %s), %.2f GiB in %.2f s\n", o.out.c_str(), st.tensors, st.ggml,
              o.dtype.c_str(), double(st.bytes) / (1 << 30), st.seconds);
  return 0;
}

Register reg(70, [](CLI::App& app) {
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("convert", "Convert a model folder into one fast-loading file (bf16, fp8 or int8 weights)");
  c->add_option("--model,-m", o->model,
                 "model folder (or converted file); may be left out when every component is given as a file");
  add_component_flags(*c, o->files);
  c->add_option("--output,-o", o->out, "output file: .safetensors (the whole model), or .gguf (the DiT alone)")
      ->required();
  c->add_option("--dtype", o->dtype,
                "weights: bf16, fp8 (e4m3, per-channel scales) or int8 (per-channel scales); for .gguf: q8_0, q4_k, "
                "q5_k, q6_k, bf16, f16 or f32")
      ->check(CLI::IsMember({"bf16", "fp8", "int8", "q8_0", "q4_k", "q5_k", "q6_k", "f16", "f32"}));
  c->add_option("--keep", o->keep, "also keep weights whose name contains PATTERN in bf16 (repeatable)");
  c->add_option("--gguf-arch", o->gguf_arch,
                 "for .gguf: general.architecture to write (default wan, what unsloth's ERNIE-Image GGUFs carry and "
                 "ComfyUI-GGUF accepts; ernie_image for tools that want the model's own name)");
  c->add_flag("--quantize-all-blocks", o->quantize_all_blocks, "quantize the first and last DiT blocks too");
  c->add_flag("--keep-text-encoder", o->keep_text_encoder, "keep the text encoder and prompt enhancer in bf16");
  c->add_flag("--no-pe", o->no_pe, "leave the prompt enhancer out");
  c->add_option("--calibrate", o->calibrate,
                 "prompts file (one per line): run the float model over them and store static activation scales "
                 "for the fp8 DiT weights (default: dynamic per-token scales, which need none)");
  c->add_option("--calibrate-steps", o->calibrate_steps, "steps per calibration prompt (default: the model's)")
      ->check(CLI::Range(1, 1000));
  c->add_option("--calibrate-size", o->calibrate_size, "calibration image size WxH (default: the model's)");
  c->add_option("--device", o->device, "device the calibration runs on: cpu, cuda or cuda:N (default cpu)");
  c->add_option("--act-dtype", o->act, "calibration activations: f32 (CPU) or bf16 (CUDA default)");
  c->add_option("--threads", o->threads, "tensors converted and written at once (default: all cores)");
  c->add_flag("--quiet,-q", o->quiet, "no progress output");
  return std::function<int()>([o] {
    const bool gguf = o->out.size() > 5 && o->out.compare(o->out.size() - 5, 5, ".gguf") == 0;
    if (gguf) return convert_to_gguf(*o);
    ERNIE_CHECK(o->gguf_arch.empty(), "--gguf-arch is for a .gguf output (-o NAME.gguf)");
    if (!o->model.empty() && std::filesystem::is_regular_file(o->model) && read_file_head(o->model, 4) == "GGUF") {
      // Any GGUF to safetensors, de-quantized.
      ERNIE_CHECK(o->dtype == "f32" || o->dtype == "bf16" || o->dtype == "f16", "--dtype ", o->dtype,
                  ": a GGUF becomes a safetensors file of f32, bf16 or f16 tensors");
      Progress progress{o->quiet};
      const ConvertStats st = convert_gguf_tensors(
          o->model, o->out, o->dtype == "f32" ? DType::F32 : o->dtype == "f16" ? DType::F16 : DType::BF16,
          std::ref(progress));
      progress.finish();
      std::printf("wrote %s: %zu tensors (%zu de-quantized) as %s, %.2f GiB in %.2f s\n", o->out.c_str(), st.tensors,
                  st.ggml, o->dtype.c_str(), double(st.bytes) / (1 << 30), st.seconds);
      return 0;
    }
    ERNIE_CHECK(ggml_output_type(o->dtype) < 0 || o->dtype == "bf16", "--dtype ", o->dtype,
                " is a GGUF type: write a .gguf file (-o NAME.gguf)");
    ConvertOptions opt;
    opt.format = parse_weight_format(o->dtype);
    ERNIE_CHECK(o->calibrate.empty() || opt.format == WeightFormat::FP8,
                "--calibrate: static activation scales are for --dtype fp8 (int8 is weight-only, bf16 unquantized)");
    ERNIE_CHECK(o->calibrate.empty() || !o->files.any(),
                "--calibrate runs the model folder's own DiT; it does not take --diffusion-model yet");
    ModelFolder m = ModelFolder::open(o->model, !o->no_pe, o->files);
    check_convert_output(m, o->out);  // before a long calibration, not after
    if (!o->calibrate.empty()) {
      const std::vector<std::string> prompts = read_prompt_list(o->calibrate);
      CalibrationOptions co;
      co.device = Device::parse(o->device);
      co.dtype = parse_dtype_option(o->act, co.device);
      co.steps = o->calibrate_steps;
      if (!o->calibrate_size.empty()) {
        char x = 0;
        char rest = 0;
        ERNIE_CHECK(std::sscanf(o->calibrate_size.c_str(), "%d%c%d%c", &co.width, &x, &co.height, &rest) == 3 &&
                        (x == 'x' || x == 'X'),
                    "--calibrate-size: expected WxH (e.g. 1024x1024), got '", o->calibrate_size, "'");
      }
      auto t0 = std::chrono::steady_clock::now();
      opt.dit_input_amax = calibrate_dit_inputs(o->model, prompts, co, [&](int done, int total) {
        if (!o->quiet) std::fprintf(stderr, "\rcalibrate: prompt %d/%d", done, total);
      });
      if (!o->quiet)
        std::fprintf(stderr, "\ncalibrate: %zu input ranges from %zu prompts in %.1f s\n", opt.dit_input_amax.size(),
                     prompts.size(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    opt.include_pe = !o->no_pe;
    for (auto& k : o->keep) opt.policy.keep.push_back(k);
    opt.policy.keep_first_last_dit_blocks = !o->quantize_all_blocks;
    opt.policy.quantize_text_encoder = !o->keep_text_encoder;
    opt.threads = o->threads;
    Progress progress{o->quiet};
    ConvertStats st = convert_model(m, o->out, opt, std::ref(progress));
    progress.finish();
    std::printf("wrote %s: %zu tensors (%zu quantized to fp8, %zu to int8), %.2f GiB in %.2f s (%.2f GB/s written)\n",
                o->out.c_str(), st.tensors, st.fp8, st.int8, double(st.bytes) / (1 << 30), st.seconds,
                double(st.bytes) / 1e9 / std::max(st.seconds, 1e-9));
    return 0;
  });
});
}  // namespace
}  // namespace ernie::cli
