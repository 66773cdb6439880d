// Several GPUs in one host (issue 28) on the device: the local communicator's collectives through device memory
// (two ranks on one GPU, the copies on its one stream), NCCL's with two or more GPUs (skipped with fewer), and the
// CFG split on the GPU against the single-device loop: the tiny model (f32 and bf16) and, DISABLED_ (minutes,
// ~17 GB), the full-size DiT with random weights at 512² on one H200.
#include <atomic>
#include <cstdio>

#include "engine/engine.h"
#include "ops/collectives/communicator.h"
#include "ops/collectives/local_communicator.h"
#include "ops/collectives/nccl_communicator.h"
#include "engine/sampler.h"
#include "engine/samplers/flow_solver.h"
#include "gpu_util.h"
#include "io/model_folder.h"
#include "models/ernie_dit.h"

namespace ernie::test {
namespace {

float value(int round, int r, int64_t k) { return float(round * 10000 + r * 100) + float(k); }

// All-gather and all-to-all over `g`'s ranks, rank r's tensors on its device; checked on the host.
void check_collectives(CommGroup& g) {
  const int n = g.size();
  std::atomic<int> checked{0};
  run_ranks(g, [&](Communicator& c) {
    for (int round = 0; round < 3; ++round) {
      const int64_t len = 6 + round;
      std::vector<float> mine(static_cast<size_t>(len));
      for (int64_t k = 0; k < len; ++k) mine[size_t(k)] = value(round, c.rank(), k);
      Tensor in = Tensor::from_vector(mine, {len}).to(c.device());
      Tensor out = Tensor::empty({n * len}, DType::F32, c.device());
      c.all_gather(in, out);
      std::vector<float> expect;
      for (int j = 0; j < n; ++j)
        for (int64_t k = 0; k < len; ++k) expect.push_back(value(round, j, k));
      ASSERT_EQ(out.to_vector(), expect) << "all_gather rank " << c.rank() << " round " << round;

      const int64_t chunk = 5;
      std::vector<float> a2a;
      for (int j = 0; j < n; ++j)
        for (int64_t k = 0; k < chunk; ++k) a2a.push_back(value(round, 10 * c.rank() + j, k));
      Tensor out2 = Tensor::empty({n * chunk}, DType::F32, c.device());
      c.all_to_all(Tensor::from_vector(a2a, {n * chunk}).to(c.device()), out2);
      expect.clear();
      for (int j = 0; j < n; ++j)
        for (int64_t k = 0; k < chunk; ++k) expect.push_back(value(round, 10 * j + c.rank(), k));
      ASSERT_EQ(out2.to_vector(), expect) << "all_to_all rank " << c.rank() << " round " << round;
      c.barrier();
      ++checked;
    }
  });
  EXPECT_EQ(checked.load(), n * 3);
}

TEST(CudaParallel, LocalCollectivesOnDeviceMemory) {
  ERNIE_REQUIRE_GPU();
  for (int n : {2, 3}) {
    auto g = make_local_group(n, kGPU);
    check_collectives(*g);
  }
}

TEST(CudaParallel, NcclCollectives) {
  ERNIE_REQUIRE_GPU();
  if (!nccl_built()) GTEST_SKIP() << "this build has no NCCL";
  const int n = cuda::device_count();
  if (n < 2) GTEST_SKIP() << "NCCL needs 2 GPUs, " << n << " visible";
  std::printf("NCCL %s over %d GPUs\n", linked_nccl_version().c_str(), n);
  std::vector<int> gpus;
  for (int i = 0; i < n; ++i) gpus.push_back(i);
  auto g = make_nccl_group(gpus);
  check_collectives(*g);
}

// ---- the CFG split on the device ----------------------------------------------------------------------

const ModelFolder& tiny_folder() {
  static ModelFolder m = ModelFolder::open(tiny_model());
  return m;
}

SamplerInput split_input(const DitConfig& c, int64_t B, int64_t h, int64_t w, int64_t text_len) {
  SamplerInput in;
  in.latents = rnd({B, c.in_channels, h, w}, 11);
  for (int64_t b = 0; b < B; ++b) {
    in.cond.push_back(rnd({text_len + 2 * b, c.text_in_dim}, uint32_t(20 + b)));
    in.uncond.push_back(rnd({1 + b, c.text_in_dim}, uint32_t(40 + b)));
  }
  in.cfg = 4.0f;
  return in;
}

// The single-device loop and the split over 2 local ranks on the GPU; returns {single, rank 0, rank 1} on the host.
std::vector<Tensor> single_and_split(const ErnieDit& dit, DType dt, SamplerKind kind, int steps, const SamplerInput& in,
                                     int64_t seq) {
  std::vector<Tensor> out(3);
  {
    auto solver = make_flow_solver(kind, tiny_folder().scheduler, steps, seq);
    out[0] = down(sample_cfg(dit, *solver, kGPU, dt, in));
  }
  auto g = make_local_group(2, kGPU);
  run_ranks(*g, [&](Communicator& c) {
    auto solver = make_flow_solver(kind, tiny_folder().scheduler, steps, seq);
    out[size_t(1 + c.rank())] = down(sample_cfg(dit, *solver, kGPU, dt, in, {}, nullptr, &c));
  });
  return out;
}

// f32: summation order only (each rank runs half the rows), as on the CPU. bf16: each half's GEMMs round
// differently; the split's latents after 4 steps stay within the tiny golden tests' CUDA bf16 tolerance.
TEST(CudaParallel, TinyCfgSplitEqualsSingleDevice) {
  ERNIE_REQUIRE_GPU();
  FOR_DTYPES {
    const ErnieDit dit = ErnieDit::load(tiny_folder(), kGPU, dt);
    for (SamplerKind kind : {SamplerKind::Euler, SamplerKind::DpmPP2M})
      for (int64_t B : {1, 2}) {
        SCOPED_TRACE(std::string(sampler_id(kind)) + " batch " + std::to_string(B));
        const SamplerInput in = split_input(dit.config(), B, 6, 5, 7);
        const std::vector<Tensor> r = single_and_split(dit, dt, kind, 4, in, 30);
        EXPECT_TRUE(tensors_close(r[1], r[0], dt == DType::F32 ? 1e-5 : 1e-2, min_cos(dt)));
        EXPECT_EQ(r[1].to_vector(), r[2].to_vector()) << "the ranks' latents differ";
      }
  }
}

TEST(CudaParallel, TinyEngineCfgSplitEqualsSingleEngine) {
  ERNIE_REQUIRE_GPU();
  EngineOptions o;
  o.model = tiny_model();
  o.device = kGPU.str();
  o.default_offload = Offload::None;
  auto one = Engine::open(o);
  o.parallel = "cfg";
  o.parallel_local = 2;
  auto split = Engine::open(o);
  EXPECT_EQ(split->info().parallel_comm, "local");
  GenerateRequest r;
  r.prompt = "a lighthouse at dusk";
  r.width = r.height = 64;
  r.steps = 4;
  r.cfg = 4.0f;
  r.num_images = 2;
  r.seed = 3;
  const GenerateResult a = one->generate(r), b = split->generate(r);
  EXPECT_EQ(b.parallel, "cfg");
  EXPECT_TRUE(tensors_close(b.latents, a.latents, 1e-2, 0.9999));
  EXPECT_TRUE(tensors_close(b.image_f32, a.image_f32, 1e-2, 0.9999));
}

// Two GPUs through NCCL, each with its own copy of the tiny model: the same images as one GPU.
TEST(CudaParallel, TinyEngineNcclCfgEqualsSingleGpu) {
  ERNIE_REQUIRE_GPU();
  if (!nccl_built()) GTEST_SKIP() << "this build has no NCCL";
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs 2 GPUs, " << cuda::device_count() << " visible";
  EngineOptions o;
  o.model = tiny_model();
  o.device = kGPU.str();
  o.default_offload = Offload::None;
  auto one = Engine::open(o);
  o.device = "auto";
  o.gpus = "0,1";
  o.parallel = "cfg";
  auto split = Engine::open(o);
  EXPECT_EQ(split->info().parallel_comm, "nccl");
  GenerateRequest r;
  r.prompt = "a lighthouse at dusk";
  r.width = r.height = 64;
  r.steps = 4;
  r.cfg = 4.0f;
  r.seed = 3;
  const GenerateResult a = one->generate(r), b = split->generate(r);
  EXPECT_EQ(b.parallel, "cfg");
  EXPECT_TRUE(tensors_close(b.latents, a.latents, 1e-2, 0.9999));
}

// Ulysses on the GPU: one forward split over 2 local ranks (device-memory all-to-alls around attention) against the
// whole forward; rows of different text lengths (packed in the whole forward, padded in the split).
TEST(CudaParallel, TinyUlyssesForwardEqualsWholeForward) {
  ERNIE_REQUIRE_GPU();
  FOR_DTYPES {
    const ErnieDit dit = ErnieDit::load(tiny_folder(), kGPU, dt);
    const DitConfig& c = dit.config();
    const Tensor x = rnd({2, c.in_channels, 6, 5}, 3), text = rnd({2, 7, c.text_in_dim}, 4);
    const std::vector<int64_t> lens = {4, 7};
    const std::vector<float> t = {700.f, 700.f};
    const Tensor whole = down(dit.forward(x, t, text, lens));
    auto g = make_local_group(2, kGPU);
    std::vector<Tensor> got(2);
    run_ranks(*g, [&](Communicator& cm) { got[size_t(cm.rank())] = down(dit.forward_seq_parallel(cm, x, t, text, lens)); });
    EXPECT_TRUE(tensors_close(got[0], whole, dt == DType::F32 ? 1e-5 : 1e-2, min_cos(dt)));
    EXPECT_EQ(got[0].to_vector(), got[1].to_vector());
  }
}

TEST(CudaParallel, TinyEngineUlyssesEqualsSingleEngine) {
  ERNIE_REQUIRE_GPU();
  EngineOptions o;
  o.model = tiny_model();
  o.device = kGPU.str();
  o.default_offload = Offload::None;
  auto one = Engine::open(o);
  o.parallel = "ulysses";
  o.parallel_local = 2;
  auto split = Engine::open(o);
  GenerateRequest r;
  r.prompt = "a lighthouse at dusk";
  r.width = r.height = 64;
  r.steps = 4;
  r.cfg = 1.0f;
  r.seed = 3;
  const GenerateResult a = one->generate(r), b = split->generate(r);
  EXPECT_EQ(b.parallel, "ulysses");
  EXPECT_TRUE(tensors_close(b.latents, a.latents, 1e-2, 0.9999));
}

// --parallel data: one engine per rank (2 local engines on one GPU; with 2+ GPUs, one per GPU), a batch of three
// requests split over them: each result as one engine alone gives it.
TEST(CudaParallel, TinyEngineDataSplitsABatch) {
  ERNIE_REQUIRE_GPU();
  EngineOptions o;
  o.model = tiny_model();
  o.device = kGPU.str();
  o.default_offload = Offload::None;
  auto one = Engine::open(o);
  std::vector<EngineOptions> modes(1, o);
  modes[0].parallel = "data";
  modes[0].parallel_local = 2;
  if (cuda::device_count() >= 2) {
    EngineOptions g = o;
    g.device = "auto";
    g.gpus = "0,1";
    g.parallel = "data";
    modes.push_back(g);
  } else {
    std::printf("data over 2 GPUs skipped: %d visible\n", cuda::device_count());
  }
  std::vector<GenerateRequest> reqs;
  for (int i = 0; i < 3; ++i) {
    GenerateRequest r;
    r.prompt = "a lighthouse at dusk, view " + std::to_string(i);
    r.width = r.height = 64;
    r.steps = 3;
    r.cfg = 4.0f;
    r.seed = uint64_t(20 + i);
    reqs.push_back(r);
  }
  for (const EngineOptions& m : modes) {
    SCOPED_TRACE(m.gpus.empty() ? "local" : m.gpus);
    auto e = Engine::open(m);
    const std::vector<GenerateResult> got = e->generate_batch(reqs);
    ASSERT_EQ(got.size(), reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(got[i].parallel, "data");
      EXPECT_TRUE(tensors_close(got[i].latents, one->generate(reqs[i]).latents, 1e-2, 0.9999));
    }
  }
}

// Full size, random weights, one H200: one DiT forward at 1024² (4096 image + 64 text tokens) in bf16, Ulysses over
// 2 local ranks sharing the weights against the whole forward.
TEST(CudaParallel, DISABLED_FullSizeUlyssesForward1024) {
  ERNIE_REQUIRE_GPU();
  const DitConfig dc{};
  const ErnieDit dit = ErnieDit::random(dc, kGPU, DType::BF16, 31);
  const Tensor x = rnd({1, dc.in_channels, 64, 64}, 21), text = rnd({1, 64, dc.text_in_dim}, 22);
  const std::vector<float> t = {500.f};
  const std::vector<int64_t> lens = {60};
  const Tensor whole = down(dit.forward(x, t, text, lens));
  auto g = make_local_group(2, kGPU);
  Tensor got;
  run_ranks(*g, [&](Communicator& c) {
    Tensor v = dit.forward_seq_parallel(c, x, t, text, lens);
    if (c.rank() == 0) got = down(v);
  });
  const auto r = tensors_close(got, whole, 1e-2, 0.9999);
  std::printf("full-size Ulysses forward (2 local ranks, bf16, 1024²) vs whole: %s\n", r.message());
  EXPECT_TRUE(r);
}

// Full size, random weights, one H200: 4 Euler steps at 512² (1024 image tokens, text 64/1) in bf16, the CFG split
// on 2 local ranks sharing the weights against the single-device loop. Random full-size weights make bf16 chaotic:
// any change in summation order grows over the steps (H200, generate at 512², 8 steps, cfg 4: the first image of
// -n 2 against -n 1 on one device, PSNR 26.4 dB; bf16 against f32, 13.4 dB; the split against one device, 32.0 dB;
// BENCHMARKS.md, sixteenth session). So this checks what such weights can show: the split is deterministic and close
// (cosine 0.9953 measured), where a wrong row or a wrong exchange decorrelates it (cosine near 0.16, as f32 vs bf16).
// The tiny model's split is exact (TinyCfgSplitEqualsSingleDevice).
TEST(CudaParallel, DISABLED_FullSizeCfgSplit512) {
  ERNIE_REQUIRE_GPU();
  const DitConfig dc{};
  const ErnieDit dit = ErnieDit::random(dc, kGPU, DType::BF16, 31);
  const SamplerInput in = split_input(dc, 1, 32, 32, 64);
  const std::vector<Tensor> r = single_and_split(dit, DType::BF16, SamplerKind::Euler, 4, in, 1024);
  const auto c = tensors_close(r[1], r[0], 0.2, 0.99);
  std::printf("full-size CFG split (2 local ranks, bf16, 4 steps at 512²) vs single: %s\n", c.message());
  EXPECT_TRUE(c);
  EXPECT_EQ(r[1].to_vector(), r[2].to_vector());
}

}  // namespace
}  // namespace ernie::test
