// The one low-VRAM choice every front end uses (engine/memory_plan.h choose_offload, plan_model_memory):
// flags checked the same way, a budget planned as plan_memory plans it, the mode Engine::open loads with,
// and the shapes planned for (a request; what a server plans for at load).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <tuple>

#include "core/error.h"
#include "golden.h"
#include "convert/convert.h"
#include "io/model_tokenizer.h"
#include "engine/engine.h"
#include "engine/memory_plan.h"

using namespace ernie;

namespace {

const Device kCuda = Device::parse("cuda");  // planning only: nothing here touches a GPU

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

MemoryFlags offload(const std::string& m) { return {m, std::nullopt}; }
MemoryFlags budget(double gib) { return {std::nullopt, gib}; }

}  // namespace

TEST(OffloadPlan, FlagsAreCheckedOnce) {
  EXPECT_NO_THROW(check_memory_flags({}, kCPU));
  EXPECT_NO_THROW(check_memory_flags(offload("text-encoder"), kCPU));
  EXPECT_NO_THROW(check_memory_flags(offload("blocks"), kCuda));
  EXPECT_NO_THROW(check_memory_flags(budget(8), kCuda));
  EXPECT_NE(error_of([] { check_memory_flags(offload("vae"), kCuda); }).find("--offload: unknown mode 'vae'"),
            std::string::npos);
  EXPECT_NE(error_of([] { check_memory_flags({"none", 8.0}, kCuda); }).find("not both"), std::string::npos);
  for (double bad : {0.0, -1.0, std::nan("")})
    EXPECT_NE(error_of([&] { check_memory_flags(budget(bad), kCuda); }).find("positive size"), std::string::npos) << bad;
  EXPECT_NE(error_of([] { check_memory_flags(budget(1e9), kCuda); }).find("not a size in GiB"), std::string::npos);
  EXPECT_NE(error_of([] { check_memory_flags(budget(8), kCPU); }).find("applies to a CUDA device"), std::string::npos);
  EXPECT_NE(error_of([] { check_memory_flags(offload("blocks"), kCPU); }).find("needs a CUDA device"),
            std::string::npos);
}

TEST(OffloadPlan, ChoiceFollowsFlagsAndBudget) {
  const ModelShapes released{DitConfig{}, MistralConfig{}, VaeConfig{}, std::nullopt};
  const GenerationShape g;
  // Nothing given: the caller's default; a mode given: that mode, with its estimate on CUDA only.
  OffloadChoice c = choose_offload(released, g, kCPU, {}, Offload::None, true);
  EXPECT_EQ(c.mode, Offload::None);
  EXPECT_EQ(c.estimate_bytes, 0u);
  c = choose_offload(released, g, kCuda, offload("blocks"), Offload::None, true);
  EXPECT_EQ(c.mode, Offload::Blocks);
  EXPECT_EQ(c.limit_bytes, 0u);
  EXPECT_EQ(c.estimate_bytes, estimate_memory(released, g).peak(Offload::Blocks));
  // A budget: plan_memory's answer, and the budget as the cap.
  for (double gib : {40.0, 24.0, 8.0}) {
    const size_t bytes = size_t(gib * double(size_t(1) << 30));
    for (bool tiling : {true, false}) {
      const MemoryPlan p = plan_memory(released, g, bytes, tiling);
      c = choose_offload(released, g, kCuda, budget(gib), Offload::None, tiling);
      EXPECT_EQ(c.mode, p.offload) << gib;
      EXPECT_EQ(c.vae_tiling, p.vae_tiling) << gib;
      EXPECT_EQ(c.estimate_bytes, p.peak) << gib;
      EXPECT_EQ(c.limit_bytes, bytes) << gib;
    }
  }
  EXPECT_NE(error_of([&] { choose_offload(released, g, kCuda, budget(4), Offload::None, true); })
                .find("even with --offload blocks"),
            std::string::npos);
}

// plan_model_memory: the mode given, else the front end's default; a budget sets the cap and, too small for
// an untiled decode, the tiling. Engine::open loads with exactly this choice (EngineInfo::memory).
TEST(OffloadPlan, ModelPlanFollowsFlagsAndBudget) {
  ModelFolder m = ModelFolder::open(test::tiny_model(), false);
  const GenerationShape g = serving_shape(m, kCuda, DType::BF16, false, VaeTilingMode::Auto);
  auto plan = [&](const MemoryFlags& f, Offload fallback, VaeTilingMode t = VaeTilingMode::Auto) {
    return plan_model_memory(m, g, f, kCuda, fallback, std::nullopt, false, t);
  };
  struct Case {
    MemoryFlags f;
    Offload fallback, mode;
  } cases[] = {{{}, Offload::None, Offload::None},
               {{}, Offload::TextEncoder, Offload::TextEncoder},
               {offload("none"), Offload::TextEncoder, Offload::None},
               {offload("text-encoder"), Offload::None, Offload::TextEncoder},
               {offload("blocks"), Offload::None, Offload::Blocks}};
  for (const Case& k : cases) {
    const OffloadChoice c = plan(k.f, k.fallback);
    EXPECT_EQ(c.mode, k.mode) << offload_name(c.mode);
    EXPECT_EQ(c.limit_bytes, 0u);
    EXPECT_FALSE(c.vae_tiling);
  }
  const ModelShapes shapes = model_shapes(m, false);
  GenerationShape gt = g;
  gt.vae_tiling = true;
  // The tiny model needs little: a budget between its tiled and untiled resident peaks.
  const size_t untiled = estimate_memory(shapes, g).peak(Offload::None);
  const size_t tiled = estimate_memory(shapes, gt).peak(Offload::None);
  ASSERT_LT(tiled, untiled);
  const double gib = double(tiled + untiled) / 2 / double(size_t(1) << 30);
  const OffloadChoice c = plan(budget(gib), Offload::TextEncoder);
  EXPECT_EQ(c.mode, Offload::None);
  EXPECT_GT(c.limit_bytes, 0u);
  EXPECT_TRUE(c.vae_tiling);
  // VaeTilingMode::Off: planned without tiling, as choose_offload(..., allow_tiling = false) plans.
  auto describe = [](const std::function<OffloadChoice()>& f) {
    std::string out;
    const std::string err = error_of([&] {
      const OffloadChoice c = f();
      out = std::string(offload_name(c.mode)) + (c.vae_tiling ? " tiled" : "");
    });
    return out.empty() ? err : out;
  };
  const std::string planned = describe([&] { return plan(budget(gib), Offload::None, VaeTilingMode::Off); });
  EXPECT_EQ(planned, describe([&] { return choose_offload(shapes, g, kCuda, budget(gib), Offload::None, false); }));
  EXPECT_NE(planned, "none tiled");
}

// Engine::open on the CPU: the mode is the one asked for, or the front end's default (nothing is estimated).
TEST(OffloadPlan, EngineOpensWithTheChosenMode) {
  for (auto [flag, def, want] : {std::tuple{std::optional<std::string>{}, Offload::None, Offload::None},
                                 std::tuple{std::optional<std::string>{}, Offload::TextEncoder, Offload::TextEncoder},
                                 std::tuple{std::optional<std::string>{"none"}, Offload::TextEncoder, Offload::None}}) {
    EngineOptions o;
    o.model = test::tiny_model();
    o.device = "cpu";
    o.offload = flag;
    o.default_offload = def;
    const auto e = Engine::open(o);
    EXPECT_EQ(e->info().memory.mode, want);
    EXPECT_EQ(e->info().memory.estimate_bytes, 0u);
    EXPECT_EQ(e->load_counts().denoiser, want == Offload::None ? 1 : 0);  // resident: loaded at open
  }
}

// A converted 8-bit file is planned with what it stores in 8 bits: the DiT's blocks and the text encoder.
TEST(OffloadPlan, ConvertedFilesAreSeenAs8bit) {
  test::TempDir dir;
  const Stored8bit folder = stored_8bit(ModelFolder::open(test::tiny_model(), false));
  EXPECT_EQ(folder.dit, std::nullopt);
  EXPECT_FALSE(folder.text_encoder);
  for (WeightFormat wf : {WeightFormat::FP8, WeightFormat::INT8, WeightFormat::BF16}) {
    for (bool te : {true, false}) {
      SCOPED_TRACE(std::string(weight_format_name(wf)) + (te ? ", text encoder too" : ", DiT only"));
      const std::string f = dir.str() + "/" + weight_format_name(wf) + (te ? "te" : "") + ".safetensors";
      ConvertOptions opt;
      opt.format = wf;
      opt.policy.keep_first_last_dit_blocks = false;  // the tiny DiT has only two blocks
      opt.policy.quantize_text_encoder = te;
      opt.include_pe = false;
      convert_model(ModelFolder::open(test::tiny_model(), false), f, opt);
      const Stored8bit s = stored_8bit(ModelFolder::open(f, false));
      const std::optional<DType> dit = wf == WeightFormat::FP8    ? std::optional<DType>(DType::F8_E4M3)
                                       : wf == WeightFormat::INT8 ? std::optional<DType>(DType::I8)
                                                                  : std::nullopt;
      EXPECT_EQ(s.dit, dit);
      EXPECT_EQ(s.text_encoder, te && wf != WeightFormat::BF16);
    }
  }
}

TEST(OffloadPlan, Shapes) {
  ModelFolder m = ModelFolder::open(test::tiny_model(), true);
  GenerateRequest r;
  r.width = 64;
  r.height = 32;
  r.num_images = 3;
  r.cfg = 2.5f;
  GenerationShape g = request_shape(r, DType::BF16, 7, VaeTilingMode::Auto);
  EXPECT_EQ(g.width, 64);
  EXPECT_EQ(g.height, 32);
  EXPECT_EQ(g.rows, 6);  // guidance doubles the rows
  EXPECT_EQ(g.text_tokens, 7);
  EXPECT_FALSE(g.vae_tiling);
  r.cfg = 1;
  r.use_pe = true;
  g = request_shape(r, DType::BF16, 7, VaeTilingMode::On);
  EXPECT_EQ(g.rows, 3);
  EXPECT_EQ(g.text_tokens, 2048);  // the enhancer may write that many
  EXPECT_TRUE(g.vae_tiling);
  // What a server plans for: the model's default request (1024², guidance 4 for non-Turbo), the longest prompt.
  g = serving_shape(m, kCuda, DType::BF16, false, VaeTilingMode::Auto);
  EXPECT_EQ(g.width, 1024);
  EXPECT_EQ(g.height, 1024);
  EXPECT_EQ(g.rows, 2);
  EXPECT_EQ(g.act, DType::BF16);
  const size_t max_len = load_model_tokenizer(m, "tokenizer").model_max_length();
  EXPECT_EQ(size_t(g.text_tokens), max_len > 0 ? max_len : 2048u);
  EXPECT_EQ(serving_shape(m, kCuda, DType::BF16, true, VaeTilingMode::Auto).text_tokens, std::max<int>(2048, int(max_len)));
}
