// Low-VRAM loading on the CPU: each component is loaded exactly once per use (offloaded) or once in all
// (resident), an offloaded run gives the resident run's result, --offload blocks is a clear error on the
// CPU, and a converted single-file model gives the folder's prompt enhancer, tokenizers and images.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "cli.h"
#include "core/error.h"
#include "golden.h"
#include "engine/memory_plan.h"
#include "convert/convert.h"
#include "io/png.h"
#include "engine/engine.h"

using namespace ernie;
using test::run_cli;
using test::TempDir;

namespace {

GenerateRequest pe_request() {
  GenerateRequest r;
  r.prompt = "a cat";
  r.width = r.height = 16;
  r.steps = 1;
  r.cfg = 2;  // the empty negative prompt is encoded too
  r.use_pe = true;
  r.seed = 13;  // the tiny enhancer stops after 13 tokens with this seed: a fast test
  return r;
}

std::unique_ptr<Engine> load(const std::string& model, bool keep, bool pe) {
  EngineOptions o;
  o.model = model;
  o.device = "cpu";
  o.offload = keep ? "none" : "text-encoder";
  o.pe = pe ? PeLoad::Required : PeLoad::Off;
  return Engine::open(o);
}

std::string counts(const Engine& p) {
  LoadCounts c = p.load_counts();
  return "te " + std::to_string(c.text_encoder) + ", pe " + std::to_string(c.prompt_enhancer) + ", dit " +
         std::to_string(c.denoiser);
}

const std::string& converted_tiny() {
  static TempDir d;
  static std::string f = [] {
    std::string path = d.str() + "/tiny.safetensors";
    convert_model(ModelFolder::open(test::tiny_model()), path, {});
    return path;
  }();
  return f;
}

}  // namespace

// Offloaded (the CLI): the prompt enhancer, the text encoder and the denoiser each load once for the first
// request; the next request reloads the two offloaded ones only. Resident: everything once, at load.
TEST(Offload, EachComponentLoadsOncePerUse) {
  auto off = load(test::tiny_model(), false, true);
  EXPECT_EQ(counts(*off), "te 0, pe 0, dit 0");
  GenerateResult a = off->generate(pe_request());
  EXPECT_EQ(counts(*off), "te 1, pe 1, dit 1");
  GenerateResult b = off->generate(pe_request());
  EXPECT_EQ(counts(*off), "te 2, pe 2, dit 1");
  EXPECT_EQ(a.revised_prompt, b.revised_prompt);
  EXPECT_EQ(a.images[0].rgb, b.images[0].rgb);
  GenerateRequest plain = pe_request();
  plain.use_pe = false;
  off->generate(plain);
  EXPECT_EQ(counts(*off), "te 3, pe 2, dit 1");

  auto res = load(test::tiny_model(), true, true);
  EXPECT_EQ(counts(*res), "te 1, pe 1, dit 1");
  GenerateResult c = res->generate(pe_request());
  res->generate(pe_request());
  EXPECT_EQ(counts(*res), "te 1, pe 1, dit 1");
  EXPECT_EQ(a.revised_prompt, c.revised_prompt);
  EXPECT_EQ(a.image_f32.to_vector(), c.image_f32.to_vector());  // offloading changes nothing in the result
}

TEST(Offload, EncodeAndEnhanceAloneLoadOnce) {
  auto off = load(test::tiny_model(), false, true);
  Tensor h1 = off->encode_prompt("a cat");
  EXPECT_FALSE(off->enhance_prompt("a cat", 16, 16).empty());
  EXPECT_EQ(counts(*off), "te 1, pe 1, dit 0");
  Tensor h2 = off->encode_prompt("a cat");
  EXPECT_EQ(counts(*off), "te 2, pe 1, dit 0");
  EXPECT_EQ(h1.to_vector(), h2.to_vector());
}

TEST(Offload, BlocksOnTheCpuIsAClearError) {
  EngineOptions o;
  o.model = test::tiny_model();
  o.device = "cpu";
  o.offload = "blocks";
  try {
    Engine::open(o);
    FAIL() << "offload_blocks on the CPU loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs a CUDA device"), std::string::npos) << e.what();
  }
  auto r = run_cli("generate --model '" + test::tiny_model() + "' -p x -W 16 -H 16 --steps 1 --offload blocks -o /tmp/x.png");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("needs a CUDA device"), std::string::npos) << r.out;
  auto bad = run_cli("generate --model '" + test::tiny_model() + "' -p x --offload vae");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("--offload"), std::string::npos) << bad.out;
}

// `ernie-image convert` output: the prompt enhancer's tokenizer and chat template come from the file, and
// enhance + generate give the folder's revised prompt and image exactly (CPU, f32).
TEST(Offload, ConvertedFileEnhancesAndGeneratesAsTheFolder) {
  auto folder = load(test::tiny_model(), true, true);
  auto file = load(converted_tiny(), true, true);
  GenerateResult a = folder->generate(pe_request()), b = file->generate(pe_request());
  EXPECT_EQ(a.revised_prompt, b.revised_prompt);
  EXPECT_NE(a.revised_prompt, "a cat");
  EXPECT_EQ(a.image_f32.to_vector(), b.image_f32.to_vector());
  EXPECT_EQ(a.images[0].rgb, b.images[0].rgb);
}

TEST(Offload, ConvertedFileThroughTheCli) {
  const std::string args = " -p 'a cat' --temperature 0 --max-new-tokens 24 -W 16 -H 16 --quiet";
  auto ef = run_cli("enhance --model '" + converted_tiny() + "'" + args);
  auto ed = run_cli("enhance --model '" + test::tiny_model() + "'" + args);
  ASSERT_EQ(ef.status, 0) << ef.out;
  ASSERT_EQ(ed.status, 0) << ed.out;
  EXPECT_EQ(ef.out, ed.out);
  TempDir d;
  const std::string gen = " --pe -p 'a cat' -W 16 -H 16 --steps 1 --seed 13 --quiet --threads 1 -o '" + d.str();
  auto gf = run_cli("generate --model '" + converted_tiny() + "'" + gen + "/f.png'");
  auto gd = run_cli("generate --model '" + test::tiny_model() + "'" + gen + "/d.png'");
  ASSERT_EQ(gf.status, 0) << gf.out;
  ASSERT_EQ(gd.status, 0) << gd.out;
  PngImage f = read_png(d.str() + "/f.png"), g = read_png(d.str() + "/d.png");
  EXPECT_EQ(f.rgb, g.rgb);
  EXPECT_EQ(nlohmann::json::parse(f.text["ernie-image"])["revised_prompt"],
            nlohmann::json::parse(g.text["ernie-image"])["revised_prompt"]);
}

// The released sizes at 1024x1024 with guidance, bf16: ~15 GiB of DiT and ~6 GiB of text encoder weights.
TEST(Offload, MemoryPlanPicksTheLeastOffloadingThatFits) {
  const ModelShapes released{DitConfig{}, MistralConfig{}, VaeConfig{}, std::nullopt};
  const MemoryEstimate e = estimate_memory(released, GenerationShape{});
  const double gib = double(size_t(1) << 30);
  EXPECT_NEAR(double(e.dit) / gib, 15.0, 0.5);
  EXPECT_NEAR(double(e.text_encoder) / gib, 6.2, 0.4);
  EXPECT_NEAR(double(e.dit_blocks) / gib, 14.6, 0.5);
  EXPECT_EQ(e.dit_block * 36, e.dit_blocks);  // 36 blocks alike
  // 8-bit: half the bytes, but the first and last blocks stay bf16, and a slot must hold one of those.
  GenerationShape fp8;
  fp8.quantize = DType::F8_E4M3;
  const MemoryEstimate q = estimate_memory(released, fp8);
  EXPECT_NEAR(double(q.dit_blocks) / gib, 7.7, 0.3);
  EXPECT_EQ(q.dit_block, e.dit_block);
  // A file's 8-bit text encoder: its projections in a byte (the embedding stays bf16).
  GenerationShape te8;
  te8.text_encoder_8bit = true;
  EXPECT_NEAR(double(estimate_memory(released, te8).text_encoder) / gib, 3.6, 0.3);
  EXPECT_GT(e.peak(Offload::None), e.peak(Offload::TextEncoder));
  EXPECT_GT(e.peak(Offload::TextEncoder), e.peak(Offload::Blocks));
  EXPECT_EQ(plan_offload(e, size_t(40) << 30), Offload::None);
  EXPECT_EQ(plan_offload(e, size_t(24) << 30), Offload::TextEncoder);
  EXPECT_EQ(plan_offload(e, size_t(8) << 30), Offload::Blocks);
  try {
    plan_offload(e, size_t(4) << 30);
    FAIL() << "4 GiB was enough";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("even with --offload blocks"), std::string::npos) << err.what();
  }
  // The prompt enhancer adds its weights resident, and nothing offloaded (it is freed before the DiT loads).
  ModelShapes with_pe = released;
  with_pe.pe = MistralConfig{};
  const MemoryEstimate p = estimate_memory(with_pe, GenerationShape{});
  EXPECT_GT(p.peak(Offload::None), e.peak(Offload::None) + (size_t(5) << 30));
  EXPECT_EQ(p.peak(Offload::TextEncoder), e.peak(Offload::TextEncoder));
  // Tiling the VAE decode shrinks its working memory; a larger image grows the DiT's.
  GenerationShape tiled;
  tiled.vae_tiling = true;
  EXPECT_LT(estimate_memory(released, tiled).vae_act, e.vae_act);
  GenerationShape big;
  big.width = big.height = 2048;
  EXPECT_GT(estimate_memory(released, big).dit_act, 3 * e.dit_act);
  // With tiling allowed, 24 GiB keeps everything resident and tiles the decode instead.
  const MemoryPlan t24 = plan_memory(released, GenerationShape{}, size_t(24) << 30, true);
  EXPECT_EQ(t24.offload, Offload::None);
  EXPECT_TRUE(t24.vae_tiling);
  EXPECT_LE(t24.peak, size_t(24) << 30);
  const MemoryPlan u24 = plan_memory(released, GenerationShape{}, size_t(24) << 30, false);
  EXPECT_EQ(u24.offload, Offload::TextEncoder);
  EXPECT_FALSE(u24.vae_tiling);
  EXPECT_EQ(plan_memory(released, GenerationShape{}, size_t(40) << 30, true).vae_tiling, false);
  EXPECT_EQ(plan_memory(released, GenerationShape{}, size_t(8) << 30, true).offload, Offload::Blocks);
  EXPECT_THROW(plan_memory(released, GenerationShape{}, size_t(4) << 30, true), Error);
  EXPECT_EQ(parse_offload("blocks"), Offload::Blocks);
  EXPECT_THROW(parse_offload("vae"), Error);
}

// doctor's per-GPU line, and its advice to convert when an fp8 file would need less offloading.
TEST(Offload, GpuFitAdvisesFp8WhenItHelps) {
  const ModelShapes released{DitConfig{}, MistralConfig{}, VaeConfig{}, std::nullopt};
  const MemoryEstimate bf16 = estimate_memory(released, GenerationShape{});
  GenerationShape q;
  q.quantize = DType::F8_E4M3;
  q.text_encoder_8bit = true;
  const MemoryEstimate fp8 = estimate_memory(released, q);
  const size_t gib = size_t(1) << 30;
  EXPECT_EQ(gpu_fit(bf16, 100 * gib, &fp8), "fits resident (--offload none)");
  EXPECT_EQ(gpu_fit(bf16, 4 * gib), "too small even with --offload blocks at this size");
  // ~6 GiB (an 8 GB card): bf16 does not fit at all, the fp8 file streams its blocks.
  const size_t small = (bf16.peak(Offload::Blocks) + fp8.peak(Offload::Blocks)) / 2;
  EXPECT_EQ(gpu_fit(bf16, small, &fp8), "too small even with --offload blocks at this size; as an fp8 file "
                                        "(convert --dtype fp8) it fits with --offload blocks");
  // Between the two text-encoder peaks: bf16 streams blocks, the fp8 file does not need to.
  const size_t mid = (bf16.peak(Offload::TextEncoder) + fp8.peak(Offload::TextEncoder)) / 2;
  ASSERT_GT(mid, bf16.peak(Offload::Blocks));
  EXPECT_EQ(gpu_fit(bf16, mid, &fp8),
            "needs --offload blocks; as an fp8 file (convert --dtype fp8) it needs only --offload text-encoder");
  EXPECT_EQ(gpu_fit(fp8, mid), "needs --offload text-encoder");
}

TEST(Offload, MaxVramIsForCuda) {
  auto r = run_cli("generate --model '" + test::tiny_model() + "' -p x -W 16 -H 16 --steps 1 --max-vram 8 -o /tmp/x.png");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--max-vram: applies to a CUDA device"), std::string::npos) << r.out;
  auto both = run_cli("generate --model '" + test::tiny_model() + "' -p x --offload none --max-vram 8");
  EXPECT_NE(both.status, 0);
  EXPECT_NE(both.out.find("not both"), std::string::npos) << both.out;
}

TEST(Offload, BenchReportsTheMode) {
  const std::string bench = "bench --model '" + test::tiny_model() + "' --device cpu --dtype f32 -W 16 -H 16 --steps 1 "
                            "--repeat 1 --prompt-tokens 4 --json";
  for (const char* mode : {"none", "text-encoder"}) {
    auto r = run_cli(bench + " --offload " + mode);
    ASSERT_EQ(r.status, 0) << r.out;
    auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
    EXPECT_EQ(j["offload"], mode);
    EXPECT_GT(j["step_s"].get<double>(), 0);
    // bench reports the engine's plan, and the engine estimates device memory for CUDA only (memory_plan.h).
    EXPECT_EQ(j["estimated_peak_gib"].get<double>(), 0);
  }
  auto b = run_cli(bench + " --offload blocks");
  EXPECT_NE(b.status, 0);
  EXPECT_NE(b.out.find("needs a CUDA device"), std::string::npos) << b.out;
}
