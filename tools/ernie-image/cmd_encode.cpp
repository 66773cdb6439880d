// ernie-image encode --model DIR -p PROMPT -o F.safetensors [--device D] [--dtype T] [--threads N] [--quantize Q]
// Writes the text encoder output (hidden_states[-2], [T, hidden] F32) as tensor `hidden`, with the prompt in
// the metadata.
#include <cstdio>

#include "commands.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine_flags.h"
#include "generate_util.h"
#include "io/safetensors.h"

namespace ernie::cli {
namespace {

struct Opts {
  EngineOptions engine;
  std::string prompt, out;
  bool quiet = false;
};

Register reg(20, [](CLI::App& app) {
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("encode", "Write a prompt's text encoder output (tensor `hidden`) to a safetensors file");
  add_model_flag(*c, o->engine);
  c->add_option("--prompt,-p", o->prompt, "the prompt")->required();
  c->add_option("--output,-o", o->out, "output .safetensors file")->required();
  add_engine_flags(*c, o->engine);
  c->add_flag("--quiet,-q", o->quiet, "print nothing but errors");
  return std::function<int()>([o] {
    check_writable(o->out, {".safetensors"});
    o->engine.load_denoiser = false;
    auto engine = Engine::open(o->engine);
    Tensor hidden = engine->encode_prompt(o->prompt);
    save_safetensors(o->out, {{"hidden", hidden}}, {{"prompt", o->prompt}, {"format", "ernie-image text embedding"}});
    if (!o->quiet) std::printf("%s: hidden %s\n", o->out.c_str(), shape_str(hidden.shape()).c_str());
    return 0;
  });
});

}  // namespace
}  // namespace ernie::cli
