// ernie-image convert --model DIR -o FILE [--dtype bf16|fp8|int8] [--keep PATTERN]... [--no-pe] [--threads N]
#include <algorithm>
#include <cstdio>

#include "commands.h"
#include "core/error.h"
#include "io/model_file.h"

namespace ernie::cli {
namespace {
struct Opts {
  std::string model, out, dtype = "bf16", calibrate;
  std::vector<std::string> keep;
  bool no_pe = false, quantize_all_blocks = false, keep_text_encoder = false, quiet = false;
  int threads = 0;
};
Register reg(70, [](CLI::App& app) {
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("convert", "Convert a model folder into one fast-loading file (bf16, fp8 or int8 weights)");
  c->add_option("--model,-m", o->model, "model folder (or converted file)")->required();
  c->add_option("--output,-o", o->out, "output file (.safetensors)")->required();
  c->add_option("--dtype", o->dtype, "weights: bf16, fp8 (e4m3, per-channel scales) or int8 (per-channel scales)")
      ->check(CLI::IsMember({"bf16", "fp8", "int8"}));
  c->add_option("--keep", o->keep, "also keep weights whose name contains PATTERN in bf16 (repeatable)");
  c->add_flag("--quantize-all-blocks", o->quantize_all_blocks, "quantize the first and last DiT blocks too");
  c->add_flag("--keep-text-encoder", o->keep_text_encoder, "keep the text encoder and prompt enhancer in bf16");
  c->add_flag("--no-pe", o->no_pe, "leave the prompt enhancer out");
  c->add_option("--calibrate", o->calibrate, "prompts file for static activation scales (not supported yet)");
  c->add_option("--threads", o->threads, "tensors converted and written at once (default: all cores)");
  c->add_flag("--quiet,-q", o->quiet, "no progress output");
  return std::function<int()>([o] {
    ERNIE_CHECK(o->calibrate.empty(), "--calibrate: static activation scales are not implemented yet; fp8 uses "
                                      "dynamic per-token activation scales, which need no calibration");
    ModelFolder m = ModelFolder::open(o->model, !o->no_pe);
    ConvertOptions opt;
    opt.format = parse_weight_format(o->dtype);
    opt.include_pe = !o->no_pe;
    for (auto& k : o->keep) opt.policy.keep.push_back(k);
    opt.policy.keep_first_last_dit_blocks = !o->quantize_all_blocks;
    opt.policy.quantize_text_encoder = !o->keep_text_encoder;
    opt.threads = o->threads;
    int last = -1;
    auto progress = [&](size_t done, size_t total) {
      int pct = total ? int(100.0 * double(done) / double(total)) : 100;
      if (o->quiet || pct == last) return;
      last = pct;
      std::fprintf(stderr, "\rconvert: %3d%%", pct);
      std::fflush(stderr);
    };
    ConvertStats st = convert_model(m, o->out, opt, progress);
    if (!o->quiet) std::fprintf(stderr, "\n");
    std::printf("wrote %s: %zu tensors (%zu quantized to %s), %.2f GiB in %.2f s (%.2f GB/s written)\n",
                o->out.c_str(), st.tensors, st.quantized, o->dtype.c_str(), double(st.bytes) / (1 << 30), st.seconds,
                double(st.bytes) / 1e9 / std::max(st.seconds, 1e-9));
    return 0;
  });
});
}  // namespace
}  // namespace ernie::cli
