// ernie-image enhance --model DIR -p PROMPT [-W 1024 -H 1024] [--system TEXT] [--temperature T] [--top-p P]
//   [--top-k K] [--seed N] [--max-new-tokens N] [--device cpu|cuda[:i]] [--threads N] [--json] [--quiet]
// Runs the prompt enhancer alone and prints the revised prompt. Temperature 0 is greedy; as in the
// reference, temperature 1 with top-p 1 is greedy too (it samples only when either differs from 1).
#include <charconv>
#include <chrono>
#include <cstdio>
#include <optional>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "engine/request.h"
#include "io/model_folder.h"
#include "models/prompt_enhancer.h"
#include "ops/ops.h"

namespace ernie::cli {
namespace {

struct Opts {
  std::string model, prompt, system, device = "cpu";
  int width = 1024, height = 1024, top_k = -1, max_new_tokens = 0, threads = 0;
  float temperature = 0.6f, top_p = 0.95f;
  std::string seed = "-1";
  bool json = false, quiet = false;
};

// A float as the shortest decimal that reads back as it (0.6f prints 0.6, not 0.6000000238).
double tidy(float f) {
  char b[32];
  auto r = std::to_chars(b, b + sizeof b, f);
  return std::stod(std::string(b, r.ptr));
}

int run(const Opts& o, const CLI::App& c) {
  // Everything a user can get wrong is checked before the weights are loaded.
  ERNIE_CHECK(o.width > 0 && o.height > 0, "-W/-H must be positive, got ", std::to_string(o.width), "x",
              std::to_string(o.height));
  ERNIE_CHECK(o.max_new_tokens >= 0, "--max-new-tokens must not be negative");
  ERNIE_CHECK(o.threads >= 0, "--threads must not be negative");
  ERNIE_CHECK(o.temperature >= 0, "--temperature must not be negative");
  const Device device = Device::parse(o.device);
  const DType act = device.is_cpu() ? DType::F32 : DType::BF16;
  if (device.is_cpu()) ops::set_threads(o.threads);
  const std::optional<uint64_t> seed = parse_seed(o.seed);  // nullopt: random (-1, the default)

  ModelFolder m = ModelFolder::open(o.model, /*with_pe=*/true);
  ERNIE_CHECK(m.pe_c.has_value(), o.model, ": no prompt enhancer (pe/ folder) in this model");
  m.require_ok("pe");
  auto t0 = std::chrono::steady_clock::now();
  PromptEnhancer pe = PromptEnhancer::load(m, device, act);
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  SamplingParams sp = pe.default_sampling();
  sp.temperature = o.temperature;
  sp.top_p = o.top_p;
  if (o.top_k >= 0) sp.top_k = o.top_k;
  sp.seed = seed ? *seed : random_seed();
  Sampler check(sp);  // validates before generating
  EnhanceOptions opt;
  opt.sampling = sp;
  opt.max_new_tokens = o.max_new_tokens;
  if (c.count("--system")) opt.system_prompt = o.system;

  EnhanceResult r = pe.enhance(o.prompt, o.width, o.height, opt);
  const Generation& g = r.generation;
  const double tok_s = g.decode_s > 0 && g.ids.size() > 1 ? double(g.ids.size() - 1) / g.decode_s : 0;
  if (o.json) {
    nlohmann::ordered_json j;
    j["revised_prompt"] = r.text;
    j["prompt_tokens"] = r.prompt_ids.size();
    j["new_tokens"] = g.ids.size();
    j["stopped_on_eos"] = g.stopped_on_eos;
    j["temperature"] = tidy(sp.temperature);
    j["top_p"] = tidy(sp.top_p);
    j["top_k"] = sp.top_k;
    j["seed"] = sp.seed;
    j["greedy"] = !sp.do_sample();
    j["device"] = device.str();
    j["load_s"] = load_s;
    j["prefill_s"] = g.prefill_s;
    j["decode_s"] = g.decode_s;
    j["decode_tokens_per_s"] = tok_s;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::fwrite(r.text.data(), 1, r.text.size(), stdout);
  std::fputc('\n', stdout);
  if (!o.quiet) {
    if (!seed && sp.do_sample()) std::fprintf(stderr, "seed: %llu\n", (unsigned long long)sp.seed);
    std::fprintf(stderr, "%zu prompt tokens, %zu new tokens%s; load %.2fs, prefill %.3fs, decode %.2fs (%.1f tok/s)\n",
                 r.prompt_ids.size(), g.ids.size(), g.stopped_on_eos ? " (eos)" : " (max_new_tokens)", load_s,
                 g.prefill_s, g.decode_s, tok_s);
  }
  return 0;
}

Register reg(25, [](CLI::App& app) {
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("enhance", "Rewrite a prompt with the model's prompt enhancer (pe/) and print it");
  c->add_option("--model,-m", o->model, "model folder (diffusers layout) or converted file with pe/")->required();
  c->add_option("--prompt,-p", o->prompt, "the prompt to enhance")->required();
  c->add_option("--width,-W", o->width, "target image width in pixels (default 1024)");
  c->add_option("--height,-H", o->height, "target image height in pixels (default 1024)");
  c->add_option("--system", o->system, "system prompt (default: none, the template's own)");
  c->add_option("--temperature", o->temperature, "sampling temperature (default 0.6; 0 = greedy)");
  c->add_option("--top-p", o->top_p, "nucleus sampling threshold (default 0.95)");
  c->add_option("--top-k", o->top_k, "keep the k most likely tokens (default: pe/generation_config.json or 50; 0 = off)");
  c->add_option("--seed", o->seed, "sampling seed: -1 (default) is random, else 0 to "
                                  "18446744073709551615");
  c->add_option("--max-new-tokens", o->max_new_tokens, "stop after N tokens (default: pe_tokenizer model_max_length)");
  c->add_option("--device", o->device, "cpu or cuda[:i] (default cpu)");
  c->add_option("--threads", o->threads, "CPU threads (default all)");
  c->add_flag("--json", o->json, "print the result and timings as JSON");
  c->add_flag("--quiet,-q", o->quiet, "print only the revised prompt");
  return std::function<int()>([o, c] { return run(*o, *c); });
});

}  // namespace
}  // namespace ernie::cli
