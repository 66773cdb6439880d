// ernie-image random-model -o DIR [--template DIR] [--dit-layers N] [--text-encoder-layers N] [--with-pe]
//                          [--seed N] [--shard-gib G] [--threads N] [-q]
// Hidden developer command: writes a model folder in the released layout with random BF16 weights of the
// released sizes (models/random_folder.h), to measure convert and load at full size without the checkpoint.
#include <cstdio>

#include "commands.h"
#include "core/error.h"
#include "models/random_folder.h"

namespace ernie::cli {
namespace {
struct Opts {
  std::string out, tpl = "tests/data/tiny-ernie-image/model";
  int dit_layers = 0, te_layers = 0, threads = 0;
  double shard_gib = 5;
  uint64_t seed = 1;
  bool with_pe = false, quiet = false;
};
Register reg(200, [](CLI::App& app) {
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("random-model", "Write a model folder of the released sizes with random weights (dev)");
  c->group("");  // not listed in --help
  c->add_option("--output,-o", o->out, "new folder to write")->required();
  c->add_option("--template", o->tpl, "model folder whose tokenizer/ and scheduler/ (pe_tokenizer/) are copied "
                "(default: the tiny test fixture, from the repository root)");
  c->add_option("--dit-layers", o->dit_layers, "DiT blocks instead of the released 36 (a smaller model)");
  c->add_option("--text-encoder-layers", o->te_layers, "text encoder layers instead of the released 26 (>= 2)");
  c->add_flag("--with-pe", o->with_pe, "also the prompt enhancer (pe/, 3.4 B parameters)");
  c->add_option("--seed", o->seed, "seed of the random weights");
  c->add_option("--shard-gib", o->shard_gib, "largest safetensors shard in GiB (default 5)");
  c->add_option("--threads", o->threads, "tensors generated and written at once (default: all cores)");
  c->add_flag("--quiet,-q", o->quiet, "no progress output");
  return std::function<int()>([o] {
    RandomFolderOptions opt;
    ERNIE_CHECK(o->dit_layers >= 0 && o->te_layers >= 0 && (o->te_layers == 0 || o->te_layers >= 2),
                "random-model: --dit-layers must be >= 1 and --text-encoder-layers >= 2");
    if (o->dit_layers > 0) opt.dit.num_layers = o->dit_layers;
    if (o->te_layers > 0) opt.text_encoder.num_hidden_layers = o->te_layers;
    if (o->with_pe) opt.pe = full_size_pe_config();
    ERNIE_CHECK(o->shard_gib > 0, "random-model: --shard-gib must be positive");
    opt.shard_bytes = size_t(o->shard_gib * double(size_t(1) << 30));
    opt.template_dir = o->tpl;
    opt.seed = o->seed;
    opt.threads = o->threads;
    int last = -1;
    auto progress = [&](size_t done, size_t total) {
      const int pct = total ? int(100.0 * double(done) / double(total)) : 100;
      if (o->quiet || pct == last) return;
      last = pct;
      std::fprintf(stderr, "\rrandom-model: %3d%%", pct);
      std::fflush(stderr);
    };
    const RandomFolderStats st = write_random_folder(o->out, opt, progress);
    if (!o->quiet) std::fprintf(stderr, "\n");
    std::printf("wrote %s: %zu tensors in %zu files, %.2f GiB in %.2f s (%.2f GB/s)\n", o->out.c_str(), st.tensors,
                st.files, double(st.bytes) / double(size_t(1) << 30), st.seconds,
                double(st.bytes) / 1e9 / std::max(st.seconds, 1e-9));
    return 0;
  });
});
}  // namespace
}  // namespace ernie::cli
