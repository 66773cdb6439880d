// GGUF DiTs on CUDA against the diffusers runs of golden_gguf (fixtures/gguf): the block-quantized weights stay
// blocks on the device and are de-quantized to the model's dtype before each GEMM (bit-exact to the host's
// decoding in F32), so the CUDA tolerances of test_cuda_pipeline apply:
// f32 (TF32 off) within relative L2 1e-3, bf16 within 3e-2 and cosine >= 0.999, with fp32 timesteps.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "golden.h"
#include "golden_cases.h"
#include "gpu_util.h"
#include "engine/engine.h"
#include "io/gguf.h"
#include "io/model_folder.h"
#include "models/ernie_dit.h"
#include "ops/ops.h"

#include <cstring>

using namespace ernie;

namespace {
std::string gguf_dir() { return test::data_dir() + "/gguf"; }
}  // namespace

class CudaGguf : public ::testing::TestWithParam<std::tuple<std::string, DType, std::string>> {};

// Resident, and with the blocks streamed from pinned host memory (--offload blocks: the GGML blocks stream).
TEST_P(CudaGguf, MatchesReference) {
  ERNIE_REQUIRE_GPU();
  auto [variant, dt, offload] = GetParam();
  std::ifstream jf(gguf_dir() + "/golden_gguf.json");
  const nlohmann::json c = nlohmann::json::parse(jf)["case"];
  const auto golden = SafeTensorsFile::open(gguf_dir() + "/golden_gguf.safetensors");
  EngineOptions o = test::golden_run_options(dt);
  o.model = gguf_dir() + "/tiny256/model";
  o.files.diffusion_model = gguf_dir() + "/dit-" + variant + ".gguf";
  o.offload = offload;
  GenerateRequest r = test::request_of_case(c);
  r.init_latents = golden->tensor("case.latents_init").clone();
  const GenerateResult res = Engine::open(o)->generate(r);
  const double rel = dt == DType::F32 ? 1e-3 : 3e-2, cos = dt == DType::F32 ? -1 : 0.999;
  auto lat = test::tensors_close(res.latents, golden->tensor(variant + ".latents_final"), rel, cos);
  auto img = test::tensors_close(res.image_f32, golden->tensor(variant + ".image"), rel, cos);
  std::printf("gguf %s %s offload %s: latents %s; image %s\n", variant.c_str(), dtype_name(dt), offload.c_str(),
              lat.message(), img.message());
  EXPECT_TRUE(lat);
  EXPECT_TRUE(img);
}

INSTANTIATE_TEST_SUITE_P(Tiny256, CudaGguf,
                         ::testing::Combine(::testing::Values("Q8_0", "Q4_K", "Q5_1", "BF16"),
                                            ::testing::Values(DType::F32, DType::BF16),
                                            ::testing::Values("none", "blocks")));

// The GPU's de-quantizer against the CPU's (the host decoding of core/ggml_types, ComfyUI-GGUF's values):
// every block type of blocks.gguf, F32 bit for bit, BF16 the F32 values rounded once.
TEST(CudaGgufBlocks, DequantizeEqualsTheCpu) {
  ERNIE_REQUIRE_GPU();
  auto f = GgufFile::open(gguf_dir() + "/blocks.gguf");
  int types = 0;
  for (const TensorInfo& ti : f->tensors()) {
    const Tensor raw = f->stored_blocks(ti.name);
    if (!raw.defined()) continue;
    SCOPED_TRACE(ti.name);
    ++types;
    const ops::Weight host = ops::Weight::ggml_blocks(raw, ti.ggml_type, ti.shape[1]);
    ops::Weight dev = host;
    dev.w = raw.to(test::kGPU);
    const Tensor want = ops::dequantize(host);
    const Tensor got = ops::dequantize(dev).to(kCPU);
    ASSERT_EQ(got.shape(), want.shape());
    EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0) << "F32 values not bit-identical";
    const Tensor got16 = ops::dequantize(dev, DType::BF16).to(kCPU), want16 = ops::cast(want, DType::BF16);
    EXPECT_EQ(std::memcmp(got16.raw(), want16.raw(), want16.nbytes()), 0) << "BF16 values not the F32 ones rounded";
  }
  EXPECT_EQ(types, 12);  // Q4_0 ... IQ4_XS
}

// A GGUF DiT on CUDA keeps its block linears quantized: its device bytes are the BF16 DiT's less, for each
// block-quantized block linear, its BF16 size plus its stored size; and the generation still matches
// (CudaGguf.MatchesReference above).
TEST(CudaGgufBlocks, DitStaysQuantizedOnTheDevice) {
  ERNIE_REQUIRE_GPU();
  auto open = [](const std::string& variant) {
    ComponentFiles files;
    files.diffusion_model = gguf_dir() + "/dit-" + variant + ".gguf";
    return ModelFolder::open(gguf_dir() + "/tiny256/model", false, files);
  };
  const size_t bf16 = ErnieDit::load(open("BF16"), test::kGPU, DType::BF16).weight_bytes();
  for (const char* variant : {"Q8_0", "Q4_K", "Q5_1"}) {
    const ModelFolder m = open(variant);
    size_t want = bf16, kept = 0;
    for (const TensorSpec& s : dit_tensor_specs(m.dit)) {
      if (s.name.rfind("layers.", 0) != 0 || s.shape.size() != 2) continue;
      const Tensor raw = m.transformer_c.stored_blocks(s.name).first;
      if (!raw.defined()) continue;
      want = want - size_t(shape_numel(s.shape)) * 2 + raw.nbytes();
      ++kept;
    }
    const size_t got = ErnieDit::load(m, test::kGPU, DType::BF16).weight_bytes();
    std::printf("tiny256 DiT %s on the device: %zu bytes (BF16 %zu), %zu block linears kept as blocks\n", variant,
                got, bf16, kept);
    EXPECT_GT(kept, 0u) << variant;
    EXPECT_EQ(got, want) << variant;
  }
}
