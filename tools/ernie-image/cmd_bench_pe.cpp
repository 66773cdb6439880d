// ernie-image bench-pe --random [--size full|small|tiny | --config pe/config.json] [--layers N]
//   [--prompt-tokens 1000] [--new-tokens 128] [--repeats 3] [--device cpu|cuda[:i]] [--threads N] [--json]
// Speed of the prompt enhancer with random weights (speed does not depend on their values): the prefill
// of a prompt (forward + the last row's logits) and batch-1 KV-cached decoding (forward of one token,
// logits, greedy choice on the host), as `enhance` runs them. Targets on one H200 at full size, bf16:
// prefill of 1,000 tokens <= 40 ms, decode >= 400 tokens/s.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <random>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "core/json.h"
#include "io/configs.h"
#include "io/model_folder.h"
#include "models/prompt_enhancer.h"
#include "ops/ops.h"

namespace ernie::cli {
namespace {

struct Opts {
  bool random = false, json = false;
  std::string size = "full", config, device = "cpu";
  int layers = 0, prompt_tokens = 1000, new_tokens = 128, repeats = 3, threads = 0;
  uint64_t seed = 0;
};

// pe/config.json of the release (Ministral3ForCausalLM, spec §3.1) and two smaller shapes of the same kind.
MistralConfig bench_config(const Opts& o) {
  MistralConfig c;
  if (!o.config.empty()) {
    c = parse_mistral_config(read_json_file(o.config), o.config);
  } else {
    c.tie_word_embeddings = true;  // logits = norm(h) · embed_tokensᵀ
    c.llama_4_scaling_beta = 0.1;  // ministral3
    c.pad_token_id = 11;
    if (o.size == "small") {  // ~0.13 B: CPU-sized
      c.hidden_size = 1024, c.num_hidden_layers = 8, c.intermediate_size = 3072;
      c.num_attention_heads = 16, c.num_key_value_heads = 4, c.head_dim = 64, c.vocab_size = 32768;
    } else if (o.size == "tiny") {  // the test fixture's shape
      c.hidden_size = 48, c.num_hidden_layers = 2, c.intermediate_size = 96;
      c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 12, c.vocab_size = 871;
    } else {
      ERNIE_CHECK(o.size == "full", "--size must be full, small or tiny, not '", o.size, "'");
    }
  }
  if (o.layers > 0) c.num_hidden_layers = o.layers;
  return c;
}

double process_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

int run(const Opts& o) {
  ERNIE_CHECK(o.random, "bench-pe measures random weights: pass --random");
  ERNIE_CHECK(o.prompt_tokens >= 1 && o.new_tokens >= 2 && o.repeats >= 1,
              "--prompt-tokens >= 1, --new-tokens >= 2 and --repeats >= 1 are needed");
  ERNIE_CHECK(o.layers >= 0 && o.threads >= 0, "--layers and --threads must not be negative");
  const Device device = Device::parse(o.device);
  const DType act = device.is_cpu() ? DType::F32 : DType::BF16;
  if (device.is_cpu()) ops::set_threads(o.threads);
  const MistralConfig cfg = bench_config(o);

  size_t params = 0;
  for (const TensorSpec& s : mistral_tensor_specs(cfg, true)) params += size_t(shape_numel(s.shape));
  if (!o.json) std::fprintf(stderr, "bench-pe: %.3f B params, generating random weights on %s...\n", params / 1e9,
                            device.str().c_str());
  MistralModel lm = MistralModel::random(cfg, device, act, o.seed, true);

  std::mt19937_64 rng(o.seed);
  std::vector<int64_t> prompt(size_t(o.prompt_tokens));
  const int64_t first = cfg.vocab_size > 1000 ? 1000 : 0;  // past the control tokens when there are any
  for (int64_t& id : prompt) id = first + int64_t(rng() % uint64_t(cfg.vocab_size - first));

  SamplingParams greedy;
  greedy.temperature = 0;
  GenerateOptions warm;
  warm.max_new_tokens = 2;
  Sampler s0(greedy);
  generate_tokens(lm, prompt, s0, warm);  // first-use costs (allocations, library handles, page faults)

  std::vector<double> prefill_ms, decode_tps;
  const double cpu0 = process_cpu_s();
  const auto wall0 = std::chrono::steady_clock::now();
  for (int r = 0; r < o.repeats; ++r) {
    Sampler s(greedy);
    GenerateOptions g;
    g.max_new_tokens = o.new_tokens;
    Generation out = generate_tokens(lm, prompt, s, g);
    prefill_ms.push_back(out.prefill_s * 1e3);
    decode_tps.push_back(double(out.ids.size() - 1) / out.decode_s);
  }

  const double measured_cpu_s = process_cpu_s() - cpu0;
  const double measured_wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();

  nlohmann::ordered_json j;
  j["bench"] = "pe";
  j["device"] = device.str();
  j["dtype"] = dtype_name(act);
  j["weights"] = "random bf16";
  j["config"] = {{"hidden_size", cfg.hidden_size},
                 {"num_hidden_layers", cfg.num_hidden_layers},
                 {"intermediate_size", cfg.intermediate_size},
                 {"num_attention_heads", cfg.num_attention_heads},
                 {"num_key_value_heads", cfg.num_key_value_heads},
                 {"head_dim", cfg.head_dim},
                 {"vocab_size", cfg.vocab_size}};
  j["params"] = params;
  j["prompt_tokens"] = o.prompt_tokens;
  j["new_tokens"] = o.new_tokens;
  j["repeats"] = o.repeats;
  j["prefill_ms"] = median(prefill_ms);
  j["prefill_ms_all"] = prefill_ms;
  j["decode_tokens_per_s"] = median(decode_tps);
  j["decode_tokens_per_s_all"] = decode_tps;
  j["decode_ms_per_token"] = 1e3 / median(decode_tps);
  // CPU time of this process over the measured runs: on a shared CPU, wall / cpu shows the contention.
  j["measured_wall_s"] = measured_wall_s;
  j["measured_cpu_s"] = measured_cpu_s;
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("prefill %d tokens: %.2f ms (median of %d)\ndecode: %.1f tokens/s (%.2f ms/token, %d tokens)\n",
                o.prompt_tokens, median(prefill_ms), o.repeats, median(decode_tps), 1e3 / median(decode_tps),
                o.new_tokens);
  }
  return 0;
}

Register reg(85, [](CLI::App& app) {
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("bench-pe", "Measure the prompt enhancer's prefill and decode speed with random weights");
  c->add_flag("--random", o->random, "random weights of the chosen shape (required)");
  c->add_option("--size", o->size, "full (the released 3.4B PE), small (~0.13B) or tiny (the test fixture)");
  c->add_option("--config", o->config, "a pe/config.json to take the shape from instead of --size");
  c->add_option("--layers", o->layers, "override the number of layers");
  c->add_option("--prompt-tokens", o->prompt_tokens, "prompt length for the prefill (default 1000)");
  c->add_option("--new-tokens", o->new_tokens, "tokens to decode (default 128)");
  c->add_option("--repeats", o->repeats, "measured runs after one warm-up; medians are reported (default 3)");
  c->add_option("--seed", o->seed, "seed of the weights and prompt ids");
  c->add_option("--device", o->device, "cpu or cuda[:i] (default cpu)");
  c->add_option("--threads", o->threads, "CPU threads (default all)");
  c->add_flag("--json", o->json, "print the result as JSON");
  return std::function<int()>([o] { return run(*o); });
});

}  // namespace
}  // namespace ernie::cli
