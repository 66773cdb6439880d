// Several GPUs in one host (issue 28), the parts that run without them: the local communicator's collectives
// against a CPU reference, a failing rank ending the others' waits, the --gpus/--parallel rules, and the CFG
// split of the denoising loop (2 local ranks on the CPU) against the single-device loop on the tiny model.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>

#include "engine/engine.h"
#include "ops/collectives/communicator.h"
#include "engine/parallel/data_parallel_engine.h"
#include "ops/collectives/local_communicator.h"
#include "ops/collectives/nccl_communicator.h"
#include "engine/parallel/parallel_plan.h"
#include "engine/sampler.h"
#include "engine/samplers/flow_solver.h"
#include "golden.h"
#include "io/model_folder.h"
#include "models/ernie_dit.h"
#include "tiny_engine.h"

using namespace ernie;

namespace {

// Rank r's value k of round `round`: distinct for every (round, rank, position).
float value(int round, int r, int64_t k) { return float(round * 10000 + r * 100) + float(k); }

Tensor filled(int round, int r, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) v[size_t(k)] = value(round, r, k);
  return Tensor::from_vector(v, {n});
}

TEST(Parallel, LocalAllGatherMatchesConcatenation) {
  for (int n : {1, 2, 3}) {
    auto g = make_local_group(n, kCPU);
    std::vector<std::vector<float>> got(static_cast<size_t>(n));
    run_ranks(*g, [&](Communicator& c) {
      for (int round = 0; round < 4; ++round) {  // several rounds: no rank reads another round's buffer
        const int64_t len = 5 + round;
        Tensor in = filled(round, c.rank(), len).reshape({1, len});
        Tensor out = Tensor::zeros({n, len}, DType::F32);
        c.all_gather(in, out);
        std::vector<float> expect;
        for (int j = 0; j < n; ++j)
          for (int64_t k = 0; k < len; ++k) expect.push_back(value(round, j, k));
        ASSERT_EQ(out.to_vector(), expect) << "rank " << c.rank() << " round " << round;
        if (round == 3) got[size_t(c.rank())] = out.to_vector();
      }
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(got[size_t(r)].size(), size_t(n * 8)) << "rank " << r << " did not finish";
  }
}

TEST(Parallel, LocalAllToAllTransposesChunks) {
  const int n = 3;
  const int64_t chunk = 4;
  auto g = make_local_group(n, kCPU);
  std::atomic<int> checked{0};
  run_ranks(*g, [&](Communicator& c) {
    for (int round = 0; round < 3; ++round) {
      // chunk j of rank r holds value(round, 10 * r + j, k)
      std::vector<float> in;
      for (int j = 0; j < n; ++j)
        for (int64_t k = 0; k < chunk; ++k) in.push_back(value(round, 10 * c.rank() + j, k));
      Tensor out = Tensor::zeros({n * chunk}, DType::F32);
      c.all_to_all(Tensor::from_vector(in, {n * chunk}), out);
      std::vector<float> expect;  // chunk j of the result: rank j's chunk for this rank
      for (int j = 0; j < n; ++j)
        for (int64_t k = 0; k < chunk; ++k) expect.push_back(value(round, 10 * j + c.rank(), k));
      ASSERT_EQ(out.to_vector(), expect) << "rank " << c.rank() << " round " << round;
      ++checked;
    }
  });
  EXPECT_EQ(checked.load(), n * 3);
}

TEST(Parallel, CollectiveArgumentsAreChecked) {
  auto g = make_local_group(2, kCPU);
  Communicator& c = g->rank(0);
  test::expect_error([&] { c.all_gather(Tensor::zeros({4}, DType::F32), Tensor::zeros({4}, DType::F32)); },
                     "2 times in");
  test::expect_error([&] { c.all_gather(Tensor::zeros({4}, DType::F32), Tensor::zeros({8}, DType::BF16)); },
                     "all_gather: in is F32");
  test::expect_error([&] { c.all_to_all(Tensor::zeros({3}, DType::F32), Tensor::zeros({3}, DType::F32)); },
                     "a multiple of 2 ranks");
  test::expect_error([] { make_local_group(0, kCPU); }, "at least one rank");
}

TEST(Parallel, ARankThatFailsEndsTheOthersWaits) {
  auto g = make_local_group(3, kCPU);
  std::atomic<int> others_failed{0};
  const std::string msg = test::error_of([&] {
    run_ranks(*g, [&](Communicator& c) {
      if (c.rank() == 1) throw Error("rank 1 broke");
      try {
        Tensor out = Tensor::zeros({3}, DType::F32);
        c.all_gather(Tensor::zeros({1}, DType::F32), out);  // rank 1 never comes
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("another rank failed"), std::string::npos) << e.what();
        ++others_failed;
        throw;
      }
    });
  });
  EXPECT_EQ(msg, "rank 1 broke");  // the first error, not the others' consequences
  EXPECT_EQ(others_failed.load(), 2);
}

TEST(Parallel, MismatchedShapesAcrossRanksFail) {
  auto g = make_local_group(2, kCPU);
  test::expect_error(
      [&] {
        run_ranks(*g, [&](Communicator& c) {
          const int64_t n = c.rank() == 0 ? 2 : 3;
          Tensor out = Tensor::zeros({2 * n}, DType::F32);
          c.all_gather(Tensor::zeros({n}, DType::F32), out);
        });
      },
      "parallel: rank 1 passed [3] F32, rank 0 [2] F32");
}

TEST(Parallel, GpuListRules) {
  EXPECT_EQ(parse_gpu_list(""), std::vector<int>{});
  EXPECT_EQ(parse_gpu_list("0,1"), (std::vector<int>{0, 1}));
  EXPECT_EQ(parse_gpu_list("3,1,2"), (std::vector<int>{3, 1, 2}));
  test::expect_error([] { parse_gpu_list("0,0"); }, "GPU 0 is named twice");
  test::expect_error([] { parse_gpu_list("0,,1"); }, "'' is not a GPU index");
  test::expect_error([] { parse_gpu_list("-1"); }, "'-1' is not a GPU index");
  test::expect_error([] { parse_gpu_list("cuda:0"); }, "'cuda:0' is not a GPU index");
  test::expect_error([] { parse_gpu_list("0,1,"); }, "'' is not a GPU index");
}

TEST(Parallel, PlanRules) {
  Device d = kCPU;
  // No flags: one device, as before.
  ParallelPlan p = plan_parallel("", "none", 0, "cpu", 0, false, d);
  EXPECT_FALSE(p.split());
  EXPECT_EQ(d, kCPU);
  // Two GPUs, cfg: NCCL ranks on them, the engine's device the first.
  p = plan_parallel("1,0", "cfg", 0, "auto", 2, true, d);
  EXPECT_TRUE(p.split());
  EXPECT_EQ(p.mode, ParallelMode::Cfg);
  EXPECT_EQ(p.gpus, (std::vector<int>{1, 0}));
  EXPECT_EQ(d, (Device{DeviceKind::CUDA, 1}));
  // auto: cfg with two GPUs, none with one.
  EXPECT_EQ(plan_parallel("0,1", "auto", 0, "auto", 2, true, d).mode, ParallelMode::Cfg);
  EXPECT_EQ(plan_parallel("0", "auto", 0, "auto", 2, true, d).mode, ParallelMode::None);
  EXPECT_EQ(d, (Device{DeviceKind::CUDA, 0}));
  // One GPU named: that device, no split.
  p = plan_parallel("1", "none", 0, "auto", 2, false, d);
  EXPECT_FALSE(p.split());
  EXPECT_EQ(d, (Device{DeviceKind::CUDA, 1}));
  // Local ranks on the CPU (the test path).
  d = kCPU;
  p = plan_parallel("", "cfg", 2, "cpu", 0, false, d);
  EXPECT_TRUE(p.split());
  EXPECT_EQ(p.local_ranks, 2);
  EXPECT_EQ(d, kCPU);

  auto err = [](const std::string& gpus, const std::string& mode, int local, const std::string& dev, int n,
                bool nccl) {
    Device x = kCPU;
    return test::error_of([&] { plan_parallel(gpus, mode, local, dev, n, nccl, x); });
  };
  EXPECT_NE(err("0,1", "cfg", 0, "auto", 1, true).find("cuda:1 does not exist (1 CUDA device(s) visible)"),
            std::string::npos);
  EXPECT_NE(err("0,1", "cfg", 0, "auto", 0, true).find("cuda:0 does not exist"), std::string::npos);
  EXPECT_NE(err("0,1", "none", 0, "auto", 2, true).find("more than one GPU needs a --parallel mode"),
            std::string::npos);
  EXPECT_NE(err("0", "cfg", 0, "auto", 2, true).find("--gpus needs exactly 2 ids"), std::string::npos);
  EXPECT_NE(err("", "cfg", 0, "cpu", 0, false).find("got none"), std::string::npos);
  EXPECT_NE(err("0,1,2", "cfg", 0, "auto", 4, true).find("exactly 2 ids"), std::string::npos);
  EXPECT_NE(err("0,1", "cfg", 0, "auto", 2, false).find("this build has no NCCL"), std::string::npos);
  EXPECT_NE(err("0,1", "cfg", 0, "cuda:1", 2, true).find("disagree"), std::string::npos);
  EXPECT_EQ(err("0,1", "data", 0, "auto", 2, false), "");  // independent engines: no NCCL needed
  EXPECT_NE(err("0", "data", 0, "auto", 2, false).find("--parallel data splits the work over several GPUs"),
            std::string::npos);
  EXPECT_NE(err("0", "ulysses", 0, "auto", 2, true).find("--gpus needs 2 or more ids"), std::string::npos);
  EXPECT_NE(err("", "ulysses", 1, "cpu", 0, false).find("a split needs 2 or more ranks"), std::string::npos);
  EXPECT_EQ(err("", "ulysses", 3, "cpu", 0, false), "");
  EXPECT_EQ(err("0,1,2,3", "ulysses", 0, "auto", 4, true), "");
  EXPECT_NE(err("", "tensor", 0, "cpu", 0, false).find("--parallel tensor: expected none, cfg"), std::string::npos);
  EXPECT_NE(err("", "cfg", 3, "cpu", 0, false).find("over 2 ranks"), std::string::npos);
  EXPECT_NE(err("", "none", 2, "cpu", 0, false).find("--parallel-local needs a --parallel mode"), std::string::npos);
  EXPECT_NE(err("0,1", "cfg", 2, "auto", 2, true).find("runs its ranks on one device"), std::string::npos);
  EXPECT_EQ(err("", "cfg", 2, "cpu", 0, false), "");
}

TEST(Parallel, NcclAbsentWithoutCuda) {
  if (nccl_built()) {
    EXPECT_FALSE(linked_nccl_version().empty());
    GTEST_SKIP() << "built with NCCL " << linked_nccl_version();
  }
  EXPECT_EQ(linked_nccl_version(), "");
  test::expect_error([] { make_nccl_group({0, 1}); }, "this build has no NCCL");
}

// ---- the CFG split of the denoising loop ------------------------------------------------------------

const ModelFolder& tiny_folder() {
  static ModelFolder m = ModelFolder::open(test::tiny_model());
  return m;
}
const ErnieDit& tiny_dit() {
  static ErnieDit d = ErnieDit::load(tiny_folder(), kCPU, DType::F32);
  return d;
}

// Batch B with text of different lengths (padding and packing differ between the split and the whole).
SamplerInput split_input(int64_t B, float cfg) {
  const DitConfig& c = tiny_dit().config();
  SamplerInput in;
  in.latents = test::rnd({B, c.in_channels, 6, 5}, 11);
  for (int64_t b = 0; b < B; ++b) {
    in.cond.push_back(test::rnd({7 + 2 * b, c.text_in_dim}, uint32_t(20 + b)));
    in.uncond.push_back(test::rnd({1 + b, c.text_in_dim}, uint32_t(40 + b)));
  }
  in.cfg = cfg;
  return in;
}

Tensor run_single(SamplerKind kind, int steps, const SamplerInput& in) {
  auto solver = make_flow_solver(kind, tiny_folder().scheduler, steps, 30);
  return sample_cfg(tiny_dit(), *solver, kCPU, DType::F32, in).to(kCPU);
}

// The split on 2 local ranks; every rank's result, and how many steps rank 0 reported.
std::vector<Tensor> run_split(SamplerKind kind, int steps, const SamplerInput& in, int* steps_seen = nullptr) {
  auto g = make_local_group(2, kCPU);
  std::vector<Tensor> out(2);
  run_ranks(*g, [&](Communicator& c) {
    auto solver = make_flow_solver(kind, tiny_folder().scheduler, steps, 30);
    std::function<void(int, const Tensor&)> on_step;
    if (c.rank() == 0 && steps_seen) on_step = [&](int k, const Tensor&) { *steps_seen = k; };
    out[size_t(c.rank())] = sample_cfg(tiny_dit(), *solver, kCPU, DType::F32, in, on_step, nullptr, &c).to(kCPU);
  });
  return out;
}

// CPU f32: the split runs each half of the rows through the same weights, but as a batch of B rows instead of 2B
// (the whole batch packs rows of different text lengths into one sequence, a single row runs padded), so the GEMMs
// and attention sum in other blocks: equal within float rounding, not bit for bit. 1e-5 relative L2 is far below
// what any mistake in the split (a swapped row, a wrong guidance) gives (order 1).
TEST(Parallel, CfgSplitEqualsSingleDevice) {
  for (SamplerKind kind : {SamplerKind::Euler, SamplerKind::DpmPP2M, SamplerKind::UniPC})
    for (int64_t B : {1, 2}) {
      SCOPED_TRACE(std::string(sampler_id(kind)) + " batch " + std::to_string(B));
      const SamplerInput in = split_input(B, 3.5f);
      const Tensor one = run_single(kind, 4, in);
      int seen = 0;
      const std::vector<Tensor> split = run_split(kind, 4, in, &seen);
      EXPECT_TRUE(test::tensors_close(split[0], one, 1e-5, 0.9999999));
      const test::Closeness c = test::closeness(split[0].to_vector(), one.to_vector());
      std::printf("cfg split vs single, %s batch %lld: rel_l2 %.3g, max_abs %.3g\n", sampler_id(kind), (long long)B,
                  c.rel_l2, c.max_abs);
      EXPECT_EQ(split[0].to_vector(), split[1].to_vector()) << "the ranks' latents differ";
      EXPECT_EQ(seen, 4);
    }
}

// A split that swapped the rows (rank 0 the conditional ones) would give another image: the test can fail.
TEST(Parallel, CfgSplitSeesTheGuidance) {
  const SamplerInput in = split_input(1, 3.5f);
  SamplerInput swapped = in;
  std::swap(swapped.cond, swapped.uncond);
  const Tensor one = run_single(SamplerKind::Euler, 3, in);
  const Tensor other = run_split(SamplerKind::Euler, 3, swapped)[0];
  EXPECT_FALSE(test::tensors_close(other, one, 1e-2, 0.99));
}

// ---- Ulysses: the sequence split over the ranks, an all-to-all around attention ---------------------------------

// One DiT forward on n local ranks against the whole forward: image 6x5 = 30 tokens plus text, so with 2 ranks an
// odd text length pads the sequence, and rows of different text lengths (which the whole forward packs) run padded.
TEST(Parallel, UlyssesForwardEqualsWholeForward) {
  const DitConfig& cfg = tiny_dit().config();
  for (int64_t B : {1, 2})
    for (int64_t T : {7, 8}) {
      SCOPED_TRACE("batch " + std::to_string(B) + " text " + std::to_string(T));
      const Tensor x = test::rnd({B, cfg.in_channels, 6, 5}, 3), text = test::rnd({B, T, cfg.text_in_dim}, 4);
      std::vector<int64_t> lens(static_cast<size_t>(B), T);
      lens[0] = T - 3;
      const std::vector<float> t(static_cast<size_t>(B), 700.f);
      const Tensor whole = tiny_dit().forward(x, t, text, lens);
      auto g = make_local_group(2, kCPU);
      std::vector<Tensor> got(2);
      run_ranks(*g, [&](Communicator& c) { got[size_t(c.rank())] = tiny_dit().forward_seq_parallel(c, x, t, text, lens); });
      EXPECT_TRUE(test::tensors_close(got[0], whole, 1e-5, 0.9999999));
      EXPECT_EQ(got[0].to_vector(), got[1].to_vector());
    }
}

TEST(Parallel, UlyssesHeadsMustSplit) {
  const DitConfig& cfg = tiny_dit().config();  // 2 heads
  auto g = make_local_group(3, kCPU);
  const Tensor x = test::rnd({1, cfg.in_channels, 4, 4}, 3), text = test::rnd({1, 4, cfg.text_in_dim}, 4);
  test::expect_error(
      [&] { run_ranks(*g, [&](Communicator& c) { tiny_dit().forward_seq_parallel(c, x, {500.f}, text, {4}); }); },
      "2 attention heads do not split over 3 ranks");
}

TEST(Parallel, UlyssesLoopEqualsSingleDevice) {
  for (float cfg : {1.0f, 3.5f})
    for (int64_t B : {1, 2}) {
      SCOPED_TRACE("cfg " + std::to_string(cfg) + " batch " + std::to_string(B));
      const SamplerInput in = split_input(B, cfg);
      const Tensor one = run_single(SamplerKind::DpmPP2M, 3, in);
      auto g = make_local_group(2, kCPU);
      std::vector<Tensor> got(2);
      run_ranks(*g, [&](Communicator& c) {
        auto solver = make_flow_solver(SamplerKind::DpmPP2M, tiny_folder().scheduler, 3, 30);
        got[size_t(c.rank())] = sample_cfg(tiny_dit(), *solver, kCPU, DType::F32, in, {}, nullptr, nullptr, &c);
      });
      EXPECT_TRUE(test::tensors_close(got[0], one, 1e-5, 0.9999999));
      EXPECT_EQ(got[0].to_vector(), got[1].to_vector());
    }
}

TEST(Parallel, CfgSplitNeedsGuidance) {
  SamplerInput in = split_input(1, 1.0f);
  test::expect_error([&] { run_split(SamplerKind::Euler, 2, in); }, "the CFG split needs cfg > 1");
}

TEST(Parallel, CfgSplitCancels) {
  const SamplerInput in = split_input(1, 3.0f);
  auto g = make_local_group(2, kCPU);
  std::atomic<bool> cancel{false};
  bool cancelled = false;
  try {
    run_ranks(*g, [&](Communicator& c) {
      auto solver = make_flow_solver(SamplerKind::Euler, tiny_folder().scheduler, 5, 30);
      std::function<void(int, const Tensor&)> on_step;
      if (c.rank() == 0) on_step = [&](int k, const Tensor&) { if (k == 2) cancel = true; };
      sample_cfg(tiny_dit(), *solver, kCPU, DType::F32, in, on_step, &cancel, &c);
    });
  } catch (const Cancelled&) {
    cancelled = true;
  }
  EXPECT_TRUE(cancelled);
}

// ---- the engine ----------------------------------------------------------------------------------------

Engine& split_engine() {
  static std::unique_ptr<Engine> p = [] {
    EngineOptions o;
    o.device = "cpu";
    o.default_offload = Offload::None;
    o.model = test::tiny_model();
    o.parallel = "cfg";
    o.parallel_local = 2;
    return Engine::open(o);
  }();
  return *p;
}

GenerateRequest tiny_request(float cfg, int images) {
  GenerateRequest r;
  r.prompt = "a red fox in the snow";
  r.negative_prompt = "blurry";
  r.width = r.height = 32;
  r.steps = 3;
  r.cfg = cfg;
  r.num_images = images;
  r.seed = 7;
  return r;
}

TEST(Parallel, EngineCfgSplitEqualsSingleEngine) {
  EXPECT_EQ(split_engine().info().parallel, "cfg");
  EXPECT_EQ(split_engine().info().parallel_comm, "local");
  for (SamplerKind kind : {SamplerKind::Euler, SamplerKind::UniPC}) {
    GenerateRequest r = tiny_request(4.0f, 2);
    r.sampler = kind;
    SCOPED_TRACE(sampler_id(kind));
    const GenerateResult one = test::tiny_engine().generate(r);
    const GenerateResult split = split_engine().generate(r);
    EXPECT_EQ(one.parallel, "");
    EXPECT_EQ(split.parallel, "cfg");
    EXPECT_TRUE(test::tensors_close(split.latents, one.latents, 1e-5, 0.9999999));
    EXPECT_TRUE(test::tensors_close(split.image_f32, one.image_f32, 1e-5, 0.9999999));
  }
}

TEST(Parallel, EngineFallsBackToOneDeviceWithoutGuidance) {
  const GenerateRequest r = tiny_request(1.0f, 1);
  const GenerateResult one = test::tiny_engine().generate(r);
  const GenerateResult split = split_engine().generate(r);
  EXPECT_EQ(split.parallel, "");  // one row: nothing to split
  EXPECT_EQ(split.latents.to_vector(), one.latents.to_vector());
}

TEST(Parallel, EngineRejectsBadFlags) {
  EngineOptions o;
  o.device = "cpu";
  o.model = test::tiny_model();
  o.parallel = "cfg";
  test::expect_error([&] { Engine::open(o); }, "--gpus needs exactly 2 ids");
  o.gpus = "0,0";
  test::expect_error([&] { Engine::open(o); }, "GPU 0 is named twice");
  o.gpus = "0,1";
  o.device = "auto";
  test::expect_error([&] { Engine::open(o); }, "does not exist");
}

TEST(Parallel, EngineUlyssesEqualsSingleEngine) {
  EngineOptions o;
  o.device = "cpu";
  o.default_offload = Offload::None;
  o.model = test::tiny_model();
  o.parallel = "ulysses";
  o.parallel_local = 2;
  auto e = Engine::open(o);
  EXPECT_EQ(e->info().parallel, "ulysses");
  for (float cfg : {1.0f, 4.0f}) {
    const GenerateRequest r = tiny_request(cfg, 2);
    const GenerateResult one = test::tiny_engine().generate(r), split = e->generate(r);
    EXPECT_EQ(split.parallel, "ulysses");
    EXPECT_TRUE(test::tensors_close(split.latents, one.latents, 1e-5, 0.9999999));
  }
  o.parallel_local = 4;  // the tiny DiT's 2 heads
  test::expect_error([&] { Engine::open(o); }, "2 attention heads do not split over 4 ranks");
}

// ---- data: one engine per rank, a batch split over them ---------------------------------------------------

TEST(Parallel, SplitBatchBalancesImages) {
  using V = std::vector<size_t>;
  EXPECT_EQ(split_batch({1, 1, 1, 1}, 2, 16), (V{0, 2}));
  EXPECT_EQ(split_batch({1, 1, 1}, 2, 16), (V{0, 2}));
  EXPECT_EQ(split_batch({1}, 2, 16), (V{0}));  // one request: one group
  EXPECT_EQ(split_batch({4, 1, 1, 1, 1}, 2, 16), (V{0, 1}));
  EXPECT_EQ(split_batch({2, 2, 2, 2, 2, 2}, 3, 16), (V{0, 2, 4}));
  EXPECT_EQ(split_batch(std::vector<int>(32, 1), 2, 16), (V{0, 16}));
  EXPECT_EQ(split_batch(std::vector<int>(8, 1), 4, 16), (V{0, 2, 4, 6}));
  EXPECT_EQ(split_batch({}, 2, 16), V{});
  // A group larger than one engine's batch runs in pieces.
  EXPECT_EQ(split_batch({15, 2, 15}, 2, 16), (V{0, 1}));
  EXPECT_EQ(engine_batches({15, 2, 15}, 1, 3, 16), (V{1, 2}));
  EXPECT_EQ(engine_batches({15, 2, 15}, 0, 1, 16), (V{0}));
  EXPECT_EQ(engine_batches({1, 1, 1, 1}, 0, 4, 2), (V{0, 2}));
  EXPECT_EQ(engine_batches({20, 1}, 0, 2, 16), (V{0, 1}));  // one request over the limit runs alone
}

TEST(Parallel, EngineDataSplitsABatch) {
  EngineOptions o;
  o.device = "cpu";
  o.default_offload = Offload::None;
  o.model = test::tiny_model();
  o.parallel = "data";
  o.parallel_local = 2;
  auto e = Engine::open(o);
  EXPECT_EQ(e->info().parallel, "data");
  EXPECT_EQ(e->max_batch_images(), 2 * test::tiny_engine().max_batch_images());
  std::vector<GenerateRequest> reqs;
  for (int i = 0; i < 3; ++i) {
    GenerateRequest r = tiny_request(3.0f, 1);
    r.seed = uint64_t(10 + i);
    r.prompt += " number " + std::to_string(i);
    reqs.push_back(r);
  }
  int progress_calls = 0;
  const std::vector<GenerateResult> got = e->generate_batch(reqs, [&](const Progress&) { ++progress_calls; });
  ASSERT_EQ(got.size(), reqs.size());
  EXPECT_GT(progress_calls, 0);
  for (size_t i = 0; i < reqs.size(); ++i) {
    SCOPED_TRACE(i);
    const GenerateResult one = test::tiny_engine().generate(reqs[i]);
    EXPECT_EQ(got[i].parallel, "data");
    EXPECT_EQ(got[i].resolved.seed, reqs[i].seed);  // in request order
    EXPECT_TRUE(test::tensors_close(got[i].latents, one.latents, 1e-5, 0.9999999));
  }
}

}  // namespace
