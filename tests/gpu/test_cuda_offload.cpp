// Low-VRAM modes on CUDA: DiT blocks streamed from pinned host memory (--offload blocks) give exactly the
// resident result (same kernels, same weights), forward after forward; the offloaded pipeline loads each
// component once per use and matches the resident image; the --max-vram allocator cap is enforced.
#include "gpu_util.h"
#include "io/model_folder.h"
#include "models/ernie_dit.h"
#include "engine/engine.h"

namespace ernie::test {
namespace {

// Small, but with head_dim 128 so attention takes the production kernels.
DitConfig small_dit(int layers) {
  DitConfig c;
  c.hidden_size = 256;
  c.num_attention_heads = 2;
  c.ffn_hidden_size = 512;
  c.in_channels = c.out_channels = 32;
  c.text_in_dim = 48;
  c.num_layers = layers;
  return c;
}

std::vector<float> run(const ErnieDit& d, uint32_t seed) {
  const Tensor x = rnd({2, 32, 6, 5}, seed), text = rnd({2, 7, 48}, seed + 1);
  return d.forward(x, {980.f, 13.f}, text, {7, 3}).to(kCPU).to_f32().to_vector();
}

TEST(CudaOffload, StreamedBlocksMatchResidentExactly) {
  ERNIE_REQUIRE_GPU();
  for (int layers : {5, 4}) {  // odd: no wrap-around prefetch; even: block 0 of the next forward prefetched
    for (DType dt : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + ", " + std::to_string(layers) + " layers");
      const ErnieDit resident = ErnieDit::random(small_dit(layers), kGPU, dt, 7);
      const ErnieDit streamed = ErnieDit::random(small_dit(layers), kGPU, dt, 7, /*stream_blocks=*/true);
      ASSERT_NE(streamed.block_streamer(), nullptr);
      EXPECT_LT(streamed.weight_bytes(), resident.weight_bytes());
      for (uint32_t seed : {1u, 2u, 1u}) {  // several forwards: slots are refilled across them
        std::vector<float> want = run(resident, seed), got = run(streamed, seed);
        ASSERT_EQ(got.size(), want.size());
        EXPECT_EQ(got, want) << "forward with seed " << seed;
      }
    }
  }
}

// An 8-bit DiT keeps its first and last blocks in bf16 (the default policy), so its blocks differ in
// layout: each streams into a slot sized for the largest.
TEST(CudaOffload, StreamedQuantizedBlocksMatchResident) {
  ERNIE_REQUIRE_GPU();
  for (int layers : {5, 4}) {
    for (DType q : {DType::F8_E4M3, DType::I8}) {
      SCOPED_TRACE(std::string(dtype_name(q)) + ", " + std::to_string(layers) + " layers");
      const ErnieDit resident = ErnieDit::random(small_dit(layers), kGPU, DType::BF16, 7, false, q);
      const ErnieDit streamed = ErnieDit::random(small_dit(layers), kGPU, DType::BF16, 7, true, q);
      ASSERT_NE(streamed.block_streamer(), nullptr);
      EXPECT_EQ(streamed.quantized_dtype(), q);
      // A slot holds the largest block (a bf16 one), more than the average.
      const BlockStreamer& bs = *streamed.block_streamer();
      EXPECT_GT(bs.block_bytes() * size_t(layers), bs.host_bytes());
      for (uint32_t seed : {1u, 2u, 1u}) EXPECT_EQ(run(streamed, seed), run(resident, seed)) << "seed " << seed;
    }
  }
}

// The tiny fixture's DiT from its checkpoint (F32 weights cast to BF16 on the way into pinned memory).
TEST(CudaOffload, StreamedCheckpointMatchesResident) {
  ERNIE_REQUIRE_GPU();
  const ModelFolder m = ModelFolder::open(tiny_model(), false);
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    const ErnieDit resident = ErnieDit::load(m, kGPU, dt), streamed = ErnieDit::load(m, kGPU, dt, true);
    EXPECT_EQ(run(streamed, 3), run(resident, 3));
  }
}

TEST(CudaOffload, UploadRate) {
  ERNIE_REQUIRE_GPU();
  DitConfig c = small_dit(8);
  c.hidden_size = 1024;
  c.num_attention_heads = 8;
  c.ffn_hidden_size = 4096;  // 12.6M params per block: 25 MB in bf16
  ErnieDit d = ErnieDit::random(c, kGPU, DType::BF16, 1, true);
  const double gbps = d.block_streamer()->measure_upload_gbps();
  std::printf("pinned upload: %.1f GB/s over %.0f MB\n", gbps, double(d.block_streamer()->host_bytes()) / 1e6);
  EXPECT_GT(gbps, 1.0);
}

GenerateRequest request(bool pe) {
  GenerateRequest r;
  r.prompt = "a cat";
  r.width = r.height = 16;
  r.steps = 2;
  r.cfg = 2;
  r.seed = 13;  // the tiny enhancer stops after 13 tokens
  r.use_pe = pe;
  return r;
}

// The CUDA side of issue 7: an offloaded generate --pe loads the enhancer and the text encoder once each.
TEST(CudaOffload, PipelineModesLoadOnceAndAgree) {
  ERNIE_REQUIRE_GPU();
  std::vector<std::vector<float>> images;
  for (int mode = 0; mode < 3; ++mode) {  // resident, text encoder offloaded, blocks streamed too
    SCOPED_TRACE("mode " + std::to_string(mode));
    EngineOptions o;
    o.model = tiny_model();
    o.device = kGPU.str();
    o.dtype = "bf16";
    o.pe = PeLoad::Required;
    o.offload = mode == 0 ? "none" : mode == 1 ? "text-encoder" : "blocks";
    auto pipe = Engine::open(o);
    GenerateResult r = pipe->generate(request(true));
    const LoadCounts n = pipe->load_counts();
    EXPECT_EQ(n.text_encoder, 1);
    EXPECT_EQ(n.prompt_enhancer, 1);
    EXPECT_EQ(n.denoiser, 1);
    images.push_back(r.image_f32.to_vector());
  }
  EXPECT_EQ(images[1], images[0]);
  EXPECT_EQ(images[2], images[0]);
}

// EngineOptions::max_vram_gib (--max-vram): the planned mode, and a whole generation stays under the cap.
TEST(CudaOffload, PipelineStaysUnderItsMemoryLimit) {
  ERNIE_REQUIRE_GPU();
  cuda::empty_cache(0);
  cuda::reset_peak_memory(0);
  const size_t limit = cuda::memory_stats(0).reserved_bytes + (size_t(256) << 20);
  EngineOptions o;
  o.model = tiny_model();
  o.device = kGPU.str();
  o.dtype = "bf16";
  o.max_vram_gib = double(limit) / double(size_t(1) << 30);
  GenerateRequest r = request(false);
  r.width = r.height = 64;
  o.plan_for = r;
  {
    auto pipe = Engine::open(o);
    EXPECT_EQ(pipe->info().memory.limit_bytes, size_t(*o.max_vram_gib * double(size_t(1) << 30)));
    EXPECT_EQ(pipe->generate(r).images.size(), 1u);
  }
  EXPECT_LE(cuda::memory_stats(0).peak_reserved_bytes, limit);
  ops::set_memory_limit(kGPU, 0);
}

TEST(CudaOffload, MemoryLimitIsEnforced) {
  ERNIE_REQUIRE_GPU();
  cuda::empty_cache(0);  // nothing cached: the cap below counts only live tensors
  const size_t reserved = cuda::memory_stats(0).reserved_bytes;
  ops::set_memory_limit(kGPU, reserved + (size_t(64) << 20));
  try {
    Tensor big = Tensor::empty({int64_t(256) << 20}, DType::U8, kGPU);
    ops::set_memory_limit(kGPU, 0);
    FAIL() << "256 MiB fit under a 64 MiB headroom";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("--max-vram"), std::string::npos) << e.what();
  }
  Tensor small = Tensor::empty({int64_t(16) << 20}, DType::U8, kGPU);  // within the cap
  ops::set_memory_limit(kGPU, 0);
  Tensor big = Tensor::empty({int64_t(256) << 20}, DType::U8, kGPU);  // no cap
  EXPECT_TRUE(big.defined());
}

}  // namespace
}  // namespace ernie::test
