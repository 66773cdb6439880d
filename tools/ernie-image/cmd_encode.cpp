// ernie-image encode --model DIR -p PROMPT -o F.safetensors [--device D] [--dtype T] [--threads N]
// Writes the text encoder output (hidden_states[-2], [T, hidden] F32) as tensor `hidden`, with the prompt in
// the metadata.
#include <cstdio>

#include "commands.h"
#include "core/error.h"
#include "generate_util.h"
#include "io/safetensors.h"
#include "pipeline/pipeline.h"

namespace ernie::cli {
namespace {

struct Opts {
  std::string model, prompt, out, device = "cpu", dtype;
  int threads = 0;
  bool quiet = false;
};

Register reg(20, [](CLI::App& app) {
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("encode", "Write a prompt's text encoder output (tensor `hidden`) to a safetensors file");
  c->add_option("--model,-m", o->model, "model folder (diffusers layout)")->required();
  c->add_option("--prompt,-p", o->prompt, "the prompt")->required();
  c->add_option("--output,-o", o->out, "output .safetensors file")->required();
  c->add_option("--device", o->device, "cpu, cuda or cuda:N (default cpu)");
  c->add_option("--dtype", o->dtype, "activation type: f32 (CPU) or bf16 (CUDA default)");
  c->add_option("--threads", o->threads, "CPU threads (default: all cores)");
  c->add_flag("--quiet,-q", o->quiet, "print nothing but errors");
  return std::function<int()>([o] {
    ERNIE_CHECK(o->threads >= 0, "--threads ", std::to_string(o->threads), " must not be negative");
    check_writable(o->out, ".safetensors");
    PipelineOptions popt;
    popt.model_dir = o->model;
    popt.device = Device::parse(o->device);
    popt.dtype = parse_dtype_option(o->dtype, popt.device);
    popt.threads = o->threads;
    popt.load_denoiser = false;
    auto pipe = Pipeline::load(popt);
    Tensor hidden = pipe->encode_prompt(o->prompt);
    save_safetensors(o->out, {{"hidden", hidden}}, {{"prompt", o->prompt}, {"format", "ernie-image text embedding"}});
    if (!o->quiet) std::printf("%s: hidden %s\n", o->out.c_str(), shape_str(hidden.shape()).c_str());
    return 0;
  });
});

}  // namespace
}  // namespace ernie::cli
