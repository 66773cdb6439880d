// The prompt enhancer against the reference's golden data (golden.json pe_cases, golden.safetensors
// pe.N.*): user content, rendered chat template, prompt ids, greedy continuation, decoded text; the
// KV-cached decode (with cache growth) against teacher forcing; sampling, cancel and errors.
// Teacher-forced logits vs pe.N.logits (rel L2 1e-4) and cached-step logits vs teacher forcing are
// tested on the language model itself in test_text_encoder.cpp (PromptEnhancerLM.*).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <sys/wait.h>

#include "core/error.h"
#include "core/json.h"
#include "golden.h"
#include "io/configs.h"
#include "convert/convert.h"
#include "models/prompt_enhancer.h"
#include "ops/ops.h"
#include "text/chat_template.h"
#include "text/pe_prompt.h"
#include "text/py_str.h"

namespace ernie {
namespace {

using ojson = nlohmann::ordered_json;

const ojson& golden_doc() {
  static ojson doc = [] {
    std::ifstream f(test::golden_json());
    return ojson::parse(f);
  }();
  return doc;
}

std::optional<std::string> system_of(const ojson& c) {
  if (c["system"].is_null()) return std::nullopt;
  return c["system"].get<std::string>();
}

TEST(PePrompt, UserContentMatchesGoldenByteForByte) {
  const ojson& cases = golden_doc()["pe_cases"];
  ASSERT_GE(cases.size(), 2u);
  for (const auto& c : cases)
    EXPECT_EQ(pe_user_content(c["prompt"], c["width"], c["height"]), c["user_content"].get<std::string>());
}

TEST(PePrompt, UserContentEscapesLikePythonJsonDumps) {
  // json.dumps({"prompt": p, "width": 848, "height": 1264}, ensure_ascii=False) in Python 3.
  EXPECT_EQ(pe_user_content("tab\there \"quoted\" back\\slash\nnew\x01\x1f\x7f é 🐱 \u2028", 848, 1264),
            "{\"prompt\": \"tab\\there \\\"quoted\\\" back\\\\slash\\nnew\\u0001\\u001f\x7f é 🐱 \u2028\", "
            "\"width\": 848, \"height\": 1264}");
  EXPECT_EQ(pe_user_content("", 848, 1264), "{\"prompt\": \"\", \"width\": 848, \"height\": 1264}");
  EXPECT_THROW(pe_user_content("bad \xff byte", 1024, 1024), Error);
  EXPECT_THROW(pe_user_content("x", 0, 1024), Error);
}

TEST(PePrompt, MessagesCarryTheOptionalSystemPrompt) {
  ojson m = pe_messages("a cat", 1024, 1024);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0]["role"], "user");
  m = pe_messages("a cat", 1024, 1024, std::string("sys"));
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0]["role"], "system");
  EXPECT_EQ(m[0]["content"], "sys");
  EXPECT_EQ(m[1]["role"], "user");
}

TEST(PePrompt, RenderedTemplateMatchesGolden) {
  std::string dir = test::tiny_model() + "/pe_tokenizer";
  ChatTemplate tmpl(load_chat_template(dir));
  nlohmann::json cfg_plain = read_json_file(dir + "/tokenizer_config.json");
  ojson cfg = ojson::parse(cfg_plain.dump());
  for (const auto& c : golden_doc()["pe_cases"]) {
    ojson ctx = chat_template_context(pe_messages(c["prompt"], c["width"], c["height"], system_of(c)), cfg);
    EXPECT_EQ(tmpl.render(ctx), c["rendered"].get<std::string>());
  }
}

const PromptEnhancer& tiny_pe() {
  static PromptEnhancer pe = PromptEnhancer::load(ModelFolder::open(test::tiny_model(), true), kCPU, DType::F32);
  return pe;
}

SamplingParams greedy() {
  SamplingParams s;
  s.temperature = 0;
  return s;
}

TEST(PromptEnhancer, ReproducesGoldenEndToEnd) {
  const PromptEnhancer& pe = tiny_pe();
  const ojson& cases = golden_doc()["pe_cases"];
  for (size_t n = 0; n < cases.size(); ++n) {
    SCOPED_TRACE("pe case " + std::to_string(n));
    const ojson& c = cases[n];
    EnhanceOptions opt;
    opt.sampling = greedy();
    opt.max_new_tokens = 24;
    opt.system_prompt = system_of(c);
    EnhanceResult r = pe.enhance(c["prompt"], c["width"], c["height"], opt);
    EXPECT_EQ(r.rendered, c["rendered"].get<std::string>());
    EXPECT_EQ(r.prompt_ids, test::golden_ids("pe." + std::to_string(n) + ".prompt_ids"));
    EXPECT_EQ(r.generation.ids, test::golden_ids("pe." + std::to_string(n) + ".generated_ids"));
    EXPECT_FALSE(r.generation.stopped_on_eos);
    EXPECT_EQ(r.text, c["decoded"].get<std::string>());
  }
}

TEST(PromptEnhancer, DefaultsFollowTheReference) {
  const PromptEnhancer& pe = tiny_pe();
  EXPECT_FLOAT_EQ(pe.default_sampling().temperature, 0.6f);
  EXPECT_FLOAT_EQ(pe.default_sampling().top_p, 0.95f);
  EXPECT_EQ(pe.default_sampling().top_k, 50);  // the tiny generation_config.json sets none
  EXPECT_TRUE(pe.default_sampling().do_sample());
  EXPECT_EQ(pe.default_max_new_tokens(), 2048);  // pe_tokenizer model_max_length
}

TEST(PromptEnhancer, LongCachedDecodeEqualsTeacherForcing) {
  // 300 greedy tokens grow the KV cache past its first allocation (prompt + 256); every token must be
  // the argmax of a full, uncached forward over the sequence before it.
  const PromptEnhancer& pe = tiny_pe();
  std::vector<int64_t> prompt = test::golden_ids("pe.0.prompt_ids");
  Sampler s(greedy());
  GenerateOptions g;
  g.max_new_tokens = 300;
  int calls = 0;
  g.on_token = [&](int n) { EXPECT_EQ(n, ++calls); };
  Generation out = generate_tokens(pe.model(), prompt, s, g);
  ASSERT_EQ(out.ids.size(), 300u);
  EXPECT_EQ(calls, 300);
  std::vector<int64_t> all = prompt;
  all.insert(all.end(), out.ids.begin(), out.ids.end() - 1);
  const MistralModel& lm = pe.model();
  Tensor logits = lm.logits(lm.forward(all, lm.num_layers()));
  const int64_t P = int64_t(prompt.size()), V = logits.dim(1);
  std::vector<float> v = logits.to_vector();
  for (int64_t i = 0; i < 300; ++i)
    ASSERT_EQ(out.ids[size_t(i)], argmax(v.data() + (P - 1 + i) * V, V)) << "token " << i;
}

TEST(PromptEnhancer, SamplingIsSeededAndStopsOnEos) {
  const PromptEnhancer& pe = tiny_pe();
  EnhanceOptions opt;
  opt.max_new_tokens = 16;
  opt.sampling = SamplingParams{1.5f, 0.99f, 0, 123};
  EnhanceResult a = pe.enhance("a cat", 1024, 1024, opt), b = pe.enhance("a cat", 1024, 1024, opt);
  EXPECT_EQ(a.generation.ids, b.generation.ids);
  EXPECT_EQ(a.text, b.text);
  bool differs = false;
  for (uint64_t seed = 124; seed < 130 && !differs; ++seed) {
    opt.sampling->seed = seed;
    differs = pe.enhance("a cat", 1024, 1024, opt).generation.ids != a.generation.ids;
  }
  EXPECT_TRUE(differs) << "different seeds always gave the same tokens";
  // Stop on EOS: make the EOS id the greedy choice at the first step by using it as eos_id.
  Sampler s(greedy());
  GenerateOptions g;
  g.max_new_tokens = 24;
  g.eos_id = test::golden_ids("pe.0.generated_ids")[2];
  Generation out = generate_tokens(pe.model(), test::golden_ids("pe.0.prompt_ids"), s, g);
  EXPECT_TRUE(out.stopped_on_eos);
  EXPECT_EQ(out.ids.size(), 3u);
  EXPECT_EQ(out.ids.back(), g.eos_id);
}

TEST(PromptEnhancer, CancelAndBadInputAreErrors) {
  const PromptEnhancer& pe = tiny_pe();
  std::atomic<bool> cancel{false};
  EnhanceOptions opt;
  opt.sampling = greedy();
  opt.max_new_tokens = 50;
  opt.cancel = &cancel;
  opt.on_token = [&](int n, int max) {
    EXPECT_EQ(max, 50);
    if (n == 3) cancel = true;
  };
  EXPECT_THROW(pe.enhance("a cat", 1024, 1024, opt), Cancelled);
  EXPECT_THROW(pe.enhance("bad \xff", 1024, 1024), Error);
  EXPECT_THROW(pe.enhance("a cat", -1, 1024), Error);
  Sampler s(greedy());
  GenerateOptions g;
  EXPECT_THROW(generate_tokens(pe.model(), {1, 2}, s, g), Error);  // max_new_tokens 0
  g.max_new_tokens = 1;
  EXPECT_THROW(generate_tokens(pe.model(), {}, s, g), Error);
  EXPECT_THROW(generate_tokens(pe.model(), {1, 100000}, s, g), Error);  // id outside the vocabulary
}

TEST(PromptEnhancer, MissingPromptEnhancerIsAClearError) {
  try {
    PromptEnhancer::load(ModelFolder::open(test::tiny_model(), /*with_pe=*/false), kCPU, DType::F32);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no prompt enhancer"), std::string::npos) << e.what();
  }
}

TEST(PromptEnhancer, LoadsFromAConvertedSingleFile) {
  // The tokenizer, chat template and generation config travel inside the file's metadata.
  test::TempDir dir;
  const std::string file = dir.str() + "/model.safetensors";
  ConvertOptions copt;
  copt.format = WeightFormat::BF16;
  convert_model(ModelFolder::open(test::tiny_model(), true), file, copt);
  PromptEnhancer pe = PromptEnhancer::load(ModelFolder::open(file, true), kCPU, DType::F32);
  const ojson& c = golden_doc()["pe_cases"][0];
  EnhanceOptions opt;
  opt.sampling = greedy();
  opt.max_new_tokens = 24;
  EnhanceResult r = pe.enhance(c["prompt"], c["width"], c["height"], opt);
  EXPECT_EQ(r.prompt_ids, test::golden_ids("pe.0.prompt_ids"));
  EXPECT_EQ(r.generation.ids, test::golden_ids("pe.0.generated_ids"));
  EXPECT_EQ(r.text, c["decoded"].get<std::string>());
}

// ---- the CLI ----------------------------------------------------------------------------------------------

struct CliRun {
  int status;
  std::string out;
};
CliRun run_cli(const std::string& args) {
  std::string cmd = std::string("'") + ERNIE_CLI + "' " + args;
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return {-1, ""};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int st = pclose(f);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

TEST(EnhanceCli, PrintsTheGreedyGoldenText) {
  CliRun r = run_cli("enhance -m '" + test::tiny_model() + "' -p 'a cat' --temperature 0 --max-new-tokens 24 -q");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, golden_doc()["pe_cases"][0]["decoded"].get<std::string>() + "\n");
  r = run_cli("enhance -m '" + test::tiny_model() +
              "' -p '一只黑白相间的中华田园犬' -W 848 -H 1264 --system 'Rewrite the prompt.' --temperature 0 "
              "--max-new-tokens 24 --json");
  EXPECT_EQ(r.status, 0);
  ojson j = ojson::parse(r.out);
  EXPECT_EQ(j["revised_prompt"], golden_doc()["pe_cases"][1]["decoded"]);
  EXPECT_EQ(j["new_tokens"], 24);
  EXPECT_EQ(j["greedy"], true);
}

TEST(EnhanceCli, BadOptionsAreClearErrors) {
  const std::string m = "enhance -m '" + test::tiny_model() + "' -p x ";
  for (const auto& [args, words] : std::vector<std::pair<std::string, std::string>>{
           {"--top-p 2", "top_p"}, {"-W 0", "-W/-H"}, {"--temperature -1", "temperature"},
           {"--device tpu", "tpu"}, {"--max-new-tokens -5", "max-new-tokens"}}) {
    CliRun r = run_cli(m + args + " 2>&1");
    EXPECT_NE(r.status, 0) << args;
    EXPECT_NE(r.out.find(words), std::string::npos) << args << ": " << r.out;
  }
  CliRun r = run_cli("enhance -m /no/such/model -p x 2>&1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("/no/such/model"), std::string::npos) << r.out;
}

// enhance's --seed follows generate's: -1 is random (the seed drawn is reported), out of range is an error.
TEST(EnhanceCli, SeedMinusOneIsRandom) {
  const std::string m = "enhance -m '" + test::tiny_model() + "' -p 'a cat' --max-new-tokens 4 ";
  CliRun r = run_cli(m + "--seed -1 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const uint64_t seed = ojson::parse(r.out)["seed"].get<uint64_t>();
  EXPECT_LE(seed, 0xffffffffull);
  CliRun again = run_cli(m + "--seed " + std::to_string(seed) + " --json");
  ASSERT_EQ(again.status, 0) << again.out;
  EXPECT_EQ(ojson::parse(again.out)["revised_prompt"], ojson::parse(r.out)["revised_prompt"]);
  for (const char* bad : {"-2", "18446744073709551616", "x"}) {
    CliRun b = run_cli(m + "--seed " + bad + " 2>&1");
    EXPECT_EQ(b.status, 1) << bad;
    EXPECT_NE(b.out.find("error: --seed"), std::string::npos) << bad << ": " << b.out;
  }
}

TEST(BenchPeCli, TinyRandomRunReportsJson) {
  CliRun r = run_cli("bench-pe --random --size tiny --prompt-tokens 8 --new-tokens 4 --repeats 1 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  ojson j = ojson::parse(r.out);
  EXPECT_EQ(j["config"]["hidden_size"], 48);
  EXPECT_EQ(j["prompt_tokens"], 8);
  EXPECT_GT(j["prefill_ms"].get<double>(), 0);
  EXPECT_GT(j["decode_tokens_per_s"].get<double>(), 0);
  EXPECT_NE(run_cli("bench-pe --size tiny 2>&1").status, 0);  // --random is required
}

}  // namespace
}  // namespace ernie
