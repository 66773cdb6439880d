// The C API (include/ernie_image.h): generation matches the C++ pipeline on a golden case, errors come back
// as values with messages, and the progress callback can cancel.
#include <gtest/gtest.h>

#include <cstddef>

#include <cmath>
#include <cstring>
#include <string>
#include <thread>

#include "ernie_image.h"
#include "golden.h"
#include "engine/engine.h"
#include "img2img_cases.h"
#include "io/safetensors.h"

namespace {

// The pixels of the one image `q` gives (empty, with a failure, when it gives none).
std::vector<uint8_t> generated_pixels(ernie_model* m, const ernie_request& q) {
  ernie_image* imgs = nullptr;
  int n = 0;
  EXPECT_EQ(ernie_generate(m, &q, nullptr, nullptr, &imgs, &n, nullptr), ERNIE_OK) << ernie_last_error();
  std::vector<uint8_t> px;
  if (n == 1) px.assign(imgs[0].data, imgs[0].data + size_t(imgs[0].width) * imgs[0].height * 3);
  ernie_free_images(imgs, n);
  return px;
}

// `q` is refused as ERNIE_ERR_INVALID with a message containing `needle`.
void expect_invalid(ernie_model* m, const ernie_request& q, const std::string& needle) {
  ernie_image* imgs = nullptr;
  int n = 0;
  char* err = nullptr;
  EXPECT_EQ(ernie_generate(m, &q, nullptr, nullptr, &imgs, &n, &err), ERNIE_ERR_INVALID) << needle;
  EXPECT_NE(std::string(err ? err : "").find(needle), std::string::npos) << (err ? err : "") << " / " << needle;
  ernie_free_string(err);
}

ernie_model* load_tiny() {
  static ernie_model* m = [] {
    ernie_options o;
    ernie_options_init(&o);
    std::string dir = ernie::test::tiny_model();
    o.model_dir = dir.c_str();
    o.threads = 1;
    ernie_model* out = nullptr;
    char* err = nullptr;
    EXPECT_EQ(ernie_load(&o, &out, &err), ERNIE_OK) << (err ? err : "");
    ernie_free_string(err);
    return out;
  }();
  return m;
}

// Golden case 2 through `m`: the largest difference from the reference image in 8-bit steps.
int golden_case_2_max_diff(ernie_model* m) {
  std::vector<float> init = ernie::test::golden_tensor("case.2.latents_init").to_vector();
  ernie_request r;
  ernie_request_init(&r);
  r.prompt = "a cat";
  r.negative_prompt = "blurry";
  r.width = r.height = 16;
  r.steps = 2;
  r.cfg = 2.5f;
  r.init_latents = init.data();
  r.init_latents_count = init.size();
  ernie_image* imgs = nullptr;
  int n = 0;
  EXPECT_EQ(ernie_generate(m, &r, nullptr, nullptr, &imgs, &n, nullptr), ERNIE_OK) << ernie_last_error();
  if (n != 1) return 256;
  EXPECT_EQ(imgs[0].width, 16);
  EXPECT_EQ(imgs[0].height, 16);
  EXPECT_EQ(imgs[0].channels, 3);
  std::vector<float> golden = ernie::test::golden_tensor("case.2.image").to_vector();
  int maxd = 0;
  for (size_t i = 0; i < golden.size(); ++i)
    maxd = std::max(maxd, std::abs(int(imgs[0].data[i]) - int(std::nearbyint(golden[i] * 255.0f))));
  ernie_free_images(imgs, n);
  return maxd;
}

}  // namespace

TEST(CApi, GeneratesGoldenCase) {
  ernie_model* m = load_tiny();
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(ernie_scale_factor(m), 4);
  EXPECT_LE(golden_case_2_max_diff(m), 1);
}

TEST(CApi, ErrorsAreValues) {
  ernie_options o;
  ernie_options_init(&o);
  o.model_dir = "/nonexistent/model";
  ernie_model* m = reinterpret_cast<ernie_model*>(0x1);
  char* err = nullptr;
  EXPECT_EQ(ernie_load(&o, &m, &err), ERNIE_ERR_INVALID);
  EXPECT_EQ(m, nullptr);
  ASSERT_NE(err, nullptr);
  EXPECT_NE(std::string(err).find("/nonexistent/model"), std::string::npos) << err;
  EXPECT_STREQ(ernie_last_error(), err);
  ernie_free_string(err);
  EXPECT_EQ(ernie_load(nullptr, &m, nullptr), ERNIE_ERR_INVALID);  // err may be NULL

  ernie_request r;
  ernie_request_init(&r);
  r.prompt = "a cat";
  r.width = 18;
  r.height = 16;
  ernie_image* imgs = nullptr;
  int n = -1;
  EXPECT_EQ(ernie_generate(load_tiny(), &r, nullptr, nullptr, &imgs, &n, &err), ERNIE_ERR_INVALID);
  EXPECT_EQ(imgs, nullptr);
  EXPECT_EQ(n, 0);
  EXPECT_NE(std::string(err).find("not a multiple of 4"), std::string::npos) << err;
  ernie_free_string(err);
  r.prompt = nullptr;
  EXPECT_EQ(ernie_generate(load_tiny(), &r, nullptr, nullptr, &imgs, &n, nullptr), ERNIE_ERR_INVALID);
  EXPECT_NE(std::string(ernie_last_error()).find("prompt"), std::string::npos);
}

// ernie_options carries its size: ernie_options_init sets it, and a size this library does not know (0: the
// caller skipped the init; larger: a newer header) is ERNIE_ERR_INVALID naming the field, before any file is read.
TEST(CApi, OptionsStructSize) {
  ernie_options o;
  std::memset(&o, 0x5a, sizeof o);
  ernie_options_init(&o);
  EXPECT_EQ(o.struct_size, sizeof(ernie_options));
  EXPECT_EQ(o.model_dir, nullptr);
  EXPECT_EQ(o.keep_text_encoder, 1);
  std::string dir = ernie::test::tiny_model();
  o.model_dir = dir.c_str();
  o.threads = 1;
  for (size_t size : {size_t(0), sizeof(ernie_options) - 1, sizeof(ernie_options) + 8}) {
    ernie_options bad = o;
    bad.struct_size = size;
    ernie_model* m = reinterpret_cast<ernie_model*>(0x1);
    char* err = nullptr;
    EXPECT_EQ(ernie_load(&bad, &m, &err), ERNIE_ERR_INVALID) << size;
    EXPECT_EQ(m, nullptr);
    const std::string want = "ernie_options.struct_size " + std::to_string(size) + ": this library takes " +
                             std::to_string(sizeof(ernie_options)) + " or " +
                             std::to_string(offsetof(ernie_options, gpus)) + " (set it up with ernie_options_init)";
    EXPECT_EQ(std::string(err ? err : ""), want);
    ernie_free_string(err);
  }
}

// The second version of ernie_options added gpus and parallel: a first-version struct (without them) still loads,
// and the new fields reach the engine's checks.
TEST(CApi, OptionsParallelFields) {
  ernie_options o;
  ernie_options_init(&o);
  EXPECT_EQ(o.gpus, nullptr);
  EXPECT_EQ(o.parallel, nullptr);
  std::string dir = ernie::test::tiny_model();
  o.model_dir = dir.c_str();
  o.threads = 1;
  ernie_options first = o;
  first.struct_size = offsetof(ernie_options, gpus);
  first.parallel = "garbage";  // beyond a first-version struct: never read
  ernie_model* m = nullptr;
  ASSERT_EQ(ernie_load(&first, &m, nullptr), ERNIE_OK) << ernie_last_error();
  ernie_free(m);
  m = nullptr;
  o.parallel = "cfg";
  char* err = nullptr;
  EXPECT_EQ(ernie_load(&o, &m, &err), ERNIE_ERR_INVALID);
  EXPECT_NE(std::string(err ? err : "").find("--gpus needs exactly 2 ids"), std::string::npos) << err;
  ernie_free_string(err);
  err = nullptr;
  o.parallel = "none";
  o.gpus = "0,0";
  EXPECT_EQ(ernie_load(&o, &m, &err), ERNIE_ERR_INVALID);
  EXPECT_NE(std::string(err ? err : "").find("GPU 0 is named twice"), std::string::npos) << err;
  ernie_free_string(err);
}

// The header's thread-safety promises: two threads generating on one handle are serialised and each gets the
// image it would get alone; two handles (CPU) generate side by side with the same results; the progress
// callback runs on the thread that called ernie_generate; ernie_last_error is per thread.
TEST(CApi, ThreadSafety) {
  ernie_options o;
  ernie_options_init(&o);
  std::string dir = ernie::test::tiny_model();
  o.model_dir = dir.c_str();
  o.threads = 1;
  ernie_model* other = nullptr;
  ASSERT_EQ(ernie_load(&o, &other, nullptr), ERNIE_OK) << ernie_last_error();
  ernie_model* shared = load_tiny();
  auto request = [](uint64_t seed) {
    ernie_request r;
    ernie_request_init(&r);
    r.prompt = "a cat";
    r.width = r.height = 16;
    r.steps = 2;
    r.seed = seed;
    return r;
  };
  const std::vector<uint8_t> alone[2] = {generated_pixels(shared, request(1)), generated_pixels(shared, request(2))};
  ASSERT_FALSE(alone[0].empty());
  ASSERT_NE(alone[0], alone[1]);
  for (ernie_model* second : {shared, other}) {
    std::vector<uint8_t> got[2];
    bool callback_thread_ok[2] = {true, true};
    std::string last_error[2];
    std::vector<std::thread> ts;
    for (int i = 0; i < 2; ++i)
      ts.emplace_back([&, i] {
        ernie_model* m = i == 0 ? shared : second;
        struct Ctx {
          std::thread::id caller;
          bool* ok;
        } ctx{std::this_thread::get_id(), &callback_thread_ok[i]};
        auto cb = [](const char*, int, int, double, void* user) -> int {
          auto* c = static_cast<Ctx*>(user);
          if (std::this_thread::get_id() != c->caller) *c->ok = false;
          return 0;
        };
        ernie_request r = request(uint64_t(i + 1));
        ernie_image* imgs = nullptr;
        int n = 0;
        if (ernie_generate(m, &r, cb, &ctx, &imgs, &n, nullptr) == ERNIE_OK && n == 1)
          got[i].assign(imgs[0].data, imgs[0].data + size_t(imgs[0].width) * imgs[0].height * 3);
        ernie_free_images(imgs, n);
        ernie_request bad = r;
        bad.width = 18 + 4 * i;  // each thread its own message
        ernie_generate(m, &bad, nullptr, nullptr, &imgs, &n, nullptr);
        last_error[i] = ernie_last_error();
      });
    for (auto& t : ts) t.join();
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(got[i], alone[i]) << "thread " << i << (second == shared ? " (one handle)" : " (two handles)");
      EXPECT_TRUE(callback_thread_ok[i]);
      const std::string want = "width " + std::to_string(18 + 4 * i) + " is not a multiple";
      EXPECT_NE(last_error[i].find(want), std::string::npos) << last_error[i];
    }
  }
  ernie_free(other);
}

TEST(CApi, ProgressCallbackCancels) {
  ernie_request r;
  ernie_request_init(&r);
  r.prompt = "a cat";
  r.width = r.height = 16;
  r.steps = 4;
  struct State {
    int denoise_calls = 0;
  } st;
  auto cb = [](const char* phase, int step, int, double, void* user) -> int {
    auto* s = static_cast<State*>(user);
    if (std::strcmp(phase, "denoise") == 0) ++s->denoise_calls;
    return std::strcmp(phase, "denoise") == 0 && step == 1;  // stop after the first step
  };
  ernie_image* imgs = nullptr;
  int n = 0;
  EXPECT_EQ(ernie_generate(load_tiny(), &r, cb, &st, &imgs, &n, nullptr), ERNIE_ERR_CANCELLED);
  EXPECT_EQ(st.denoise_calls, 2);  // step 0 and step 1, then cancelled
  EXPECT_EQ(imgs, nullptr);
}

TEST(CApi, EncodePrompt) {
  float* data = nullptr;
  int t = 0, dim = 0;
  ASSERT_EQ(ernie_encode_prompt(load_tiny(), "a cat", &data, &t, &dim, nullptr), ERNIE_OK) << ernie_last_error();
  ernie::Tensor h = ernie::Tensor::from_vector(std::vector<float>(data, data + size_t(t) * dim), {t, dim});
  EXPECT_TRUE(ernie::test::tensors_close(h, ernie::test::golden_tensor("te.0.hidden"), ernie::test::kCpuRelL2));
  ernie_free_floats(data);
  EXPECT_STRNE(ernie_version(), "");
}

// keep_text_encoder = 0 frees the text encoder after each use; the next prompt loads it again.
TEST(CApi, TextEncoderReloadsAfterBeingFreed) {
  ernie_options o;
  ernie_options_init(&o);
  std::string dir = ernie::test::tiny_model();
  o.model_dir = dir.c_str();
  o.keep_text_encoder = 0;
  ernie_model* m = nullptr;
  ASSERT_EQ(ernie_load(&o, &m, nullptr), ERNIE_OK) << ernie_last_error();
  for (int i = 0; i < 2; ++i) {
    float* data = nullptr;
    int t = 0, dim = 0;
    ASSERT_EQ(ernie_encode_prompt(m, "a cat", &data, &t, &dim, nullptr), ERNIE_OK) << ernie_last_error();
    ernie::Tensor h = ernie::Tensor::from_vector(std::vector<float>(data, data + size_t(t) * dim), {t, dim});
    EXPECT_TRUE(ernie::test::tensors_close(h, ernie::test::golden_tensor("te.0.hidden"), ernie::test::kCpuRelL2));
    ernie_free_floats(data);
  }
  ernie_free(m);
}

// ernie_memory_options: the low-VRAM mode and VAE tiling of ernie_load_ex.
namespace {

struct Loaded {
  ernie_status status = ERNIE_ERR_INTERNAL;
  ernie_model* model = nullptr;
  std::string err;
};

Loaded load_with(const ernie_memory_options* mem, int keep_text_encoder = 1) {
  ernie_options o;
  ernie_options_init(&o);
  std::string dir = ernie::test::tiny_model();
  o.model_dir = dir.c_str();
  o.threads = 1;
  o.keep_text_encoder = keep_text_encoder;
  Loaded l;
  char* err = nullptr;
  l.status = ernie_load_ex(&o, mem, &l.model, &err);
  if (err) l.err = err;
  ernie_free_string(err);
  return l;
}

}  // namespace

TEST(CApi, MemoryOptionsDefaults) {
  ernie_memory_options mem;
  std::memset(&mem, 0x5a, sizeof mem);
  ernie_memory_options_init(&mem);
  EXPECT_EQ(mem.struct_size, sizeof(ernie_memory_options));
  EXPECT_EQ(mem.offload, ERNIE_OFFLOAD_DEFAULT);
  EXPECT_EQ(mem.max_vram_gib, 0.0);
  EXPECT_EQ(mem.vae_tiling, ERNIE_VAE_TILING_AUTO);
  EXPECT_EQ(mem.vae_tile, 0);
  EXPECT_EQ(mem.quantize, ERNIE_QUANTIZE_NONE);
  EXPECT_EQ(mem.attention_fp8, 0);
  EXPECT_EQ(mem.lora_at_runtime, 0);
  ernie_memory_options_init(nullptr);  // no crash
  EXPECT_EQ(ernie_model_offload(nullptr), ERNIE_OFFLOAD_DEFAULT);
  // ernie_load: everything resident; keep_text_encoder = 0: the text encoder offloaded.
  EXPECT_EQ(ernie_model_offload(load_tiny()), ERNIE_OFFLOAD_NONE);
  Loaded l = load_with(nullptr, 0);
  ASSERT_EQ(l.status, ERNIE_OK) << l.err;
  EXPECT_EQ(ernie_model_offload(l.model), ERNIE_OFFLOAD_TEXT_ENCODER);
  ernie_free(l.model);
}

// An offloaded text encoder and a tiled decode give the golden image; the text encoder reloads per use.
TEST(CApi, OffloadAndTilingGiveTheGoldenImage) {
  ernie_memory_options mem;
  ernie_memory_options_init(&mem);
  mem.offload = ERNIE_OFFLOAD_TEXT_ENCODER;
  mem.vae_tiling = ERNIE_VAE_TILING_ON;
  mem.vae_tile = 8;  // 16x16 images: four tiles
  Loaded l = load_with(&mem);
  ASSERT_EQ(l.status, ERNIE_OK) << l.err;
  EXPECT_EQ(ernie_model_offload(l.model), ERNIE_OFFLOAD_TEXT_ENCODER);
  for (int i = 0; i < 2; ++i) EXPECT_LE(golden_case_2_max_diff(l.model), 1) << "run " << i;
  ernie_free(l.model);
  mem.offload = ERNIE_OFFLOAD_NONE;
  mem.vae_tiling = ERNIE_VAE_TILING_OFF;
  mem.vae_tile = 0;
  l = load_with(&mem);
  ASSERT_EQ(l.status, ERNIE_OK) << l.err;
  EXPECT_EQ(ernie_model_offload(l.model), ERNIE_OFFLOAD_NONE);
  EXPECT_LE(golden_case_2_max_diff(l.model), 1);
  ernie_free(l.model);
}

// 8-bit DiT weights through the C API: the image stays near the golden one (the tiny DiT has two blocks,
// the first and last, which the default policy keeps in bf16: so this checks the plumbing and that a
// first-version struct, without `quantize`, still loads).
TEST(CApi, QuantizeOptionLoads) {
  ernie_memory_options mem;
  ernie_memory_options_init(&mem);
  for (int q : {ERNIE_QUANTIZE_FP8, ERNIE_QUANTIZE_INT8}) {
    mem.quantize = q;
    Loaded l = load_with(&mem);
    ASSERT_EQ(l.status, ERNIE_OK) << l.err;
    EXPECT_LE(golden_case_2_max_diff(l.model), 1);
    ernie_free(l.model);
  }
  mem.attention_fp8 = 1;  // on the CPU (and in bf16 blocks) attention stays bf16/f32: the same image
  Loaded a = load_with(&mem);
  ASSERT_EQ(a.status, ERNIE_OK) << a.err;
  EXPECT_LE(golden_case_2_max_diff(a.model), 1);
  ernie_free(a.model);
  mem.lora_at_runtime = 1;  // no LoRA here: the same image
  a = load_with(&mem);
  ASSERT_EQ(a.status, ERNIE_OK) << a.err;
  EXPECT_LE(golden_case_2_max_diff(a.model), 1);
  ernie_free(a.model);
  mem.struct_size = offsetof(ernie_memory_options, lora_at_runtime);  // the third version
  mem.lora_at_runtime = 9;                                            // not read
  a = load_with(&mem);
  EXPECT_EQ(a.status, ERNIE_OK) << a.err;
  ernie_free(a.model);
  mem.struct_size = offsetof(ernie_memory_options, attention_fp8);  // the second version
  mem.attention_fp8 = 5;                                            // not read
  a = load_with(&mem);
  EXPECT_EQ(a.status, ERNIE_OK) << a.err;
  ernie_free(a.model);
  mem.struct_size = offsetof(ernie_memory_options, quantize);
  mem.quantize = 77;  // beyond the first version's size: not read
  Loaded l = load_with(&mem);
  EXPECT_EQ(l.status, ERNIE_OK) << l.err;
  ernie_free(l.model);
}

TEST(CApi, BadMemoryOptionsAreErrors) {
  struct Case {
    const char* what;
    void (*set)(ernie_memory_options&);
    int keep_text_encoder;
    const char* want;
  } cases[] = {
      {"blocks on the CPU", [](ernie_memory_options& m) { m.offload = ERNIE_OFFLOAD_BLOCKS; }, 1,
       "--offload blocks: streaming DiT blocks needs a CUDA device"},
      {"max_vram on the CPU", [](ernie_memory_options& m) { m.max_vram_gib = 8; }, 1, "applies to a CUDA device"},
      {"negative max_vram", [](ernie_memory_options& m) { m.max_vram_gib = -1; }, 1, "positive size in GiB"},
      {"both", [](ernie_memory_options& m) { m.offload = ERNIE_OFFLOAD_NONE, m.max_vram_gib = 8; }, 1, "not both"},
      {"unknown offload", [](ernie_memory_options& m) { m.offload = 7; }, 1, "ernie_memory_options.offload 7"},
      {"unknown tiling", [](ernie_memory_options& m) { m.vae_tiling = -1; }, 1, "ernie_memory_options.vae_tiling -1"},
      {"negative tile", [](ernie_memory_options& m) { m.vae_tile = -8; }, 1, "ernie_memory_options.vae_tile -8"},
      {"tile off the VAE grid", [](ernie_memory_options& m) { m.vae_tile = 3; }, 1, "vae-tile 3 must be a positive multiple"},
      {"struct_size", [](ernie_memory_options& m) { m.struct_size = 8; }, 1, "ernie_memory_options.struct_size 8"},
      {"unknown quantize", [](ernie_memory_options& m) { m.quantize = 9; }, 1, "ernie_memory_options.quantize 9"},
      {"attention_fp8 2", [](ernie_memory_options& m) { m.attention_fp8 = 2; }, 1, "ernie_memory_options.attention_fp8 2"},
      {"lora_at_runtime 3", [](ernie_memory_options& m) { m.lora_at_runtime = 3; }, 1,
       "ernie_memory_options.lora_at_runtime 3"},
      {"keep_text_encoder 0 and none", [](ernie_memory_options& m) { m.offload = ERNIE_OFFLOAD_NONE; }, 0,
       "keep_text_encoder = 0 contradicts"},
  };
  for (const Case& c : cases) {
    ernie_memory_options mem;
    ernie_memory_options_init(&mem);
    c.set(mem);
    Loaded l = load_with(&mem, c.keep_text_encoder);
    EXPECT_EQ(l.status, ERNIE_ERR_INVALID) << c.what;
    EXPECT_EQ(l.model, nullptr) << c.what;
    EXPECT_NE(l.err.find(c.want), std::string::npos) << c.what << ": " << l.err;
    ernie_free(l.model);
  }
}

// sampler, shift and rng, appended to ernie_request: a multistep sampler runs from the golden initial latents
// (its numbers: test_samplers); unknown names and bad shifts are ERNIE_ERR_INVALID naming the field; torch's
// generators record the batch's seed on every image, ernie's seed + i.
TEST(CApi, SamplerShiftAndRng) {
  auto g = ernie::SafeTensorsFile::open(ernie::test::data_dir() + "/samplers-lora/golden2.safetensors");
  std::vector<float> init = g->tensor("samplers.case.1.latents_init").to_vector();
  ernie_request r;
  ernie_request_init(&r);
  EXPECT_EQ(r.sampler, nullptr);
  EXPECT_EQ(r.shift, 0.0f);
  r.prompt = "一只黑白相间的中华田园犬";
  r.width = 32;
  r.height = 16;
  r.steps = 4;
  r.cfg = 1;
  r.init_latents = init.data();
  r.init_latents_count = init.size();
  r.sampler = "dpmpp_2m";
  ernie_image* imgs = nullptr;
  int n = 0;
  ASSERT_EQ(ernie_generate(load_tiny(), &r, nullptr, nullptr, &imgs, &n, nullptr), ERNIE_OK) << ernie_last_error();
  ernie_free_images(imgs, n);
  r.sampler = "lms";
  char* err = nullptr;
  EXPECT_EQ(ernie_generate(load_tiny(), &r, nullptr, nullptr, &imgs, &n, &err), ERNIE_ERR_INVALID);
  ASSERT_NE(err, nullptr);
  EXPECT_NE(std::string(err).find("sampler 'lms'"), std::string::npos) << err;
  ernie_free_string(err);
  r.sampler = "unipc";
  r.shift = -1;
  EXPECT_EQ(ernie_generate(load_tiny(), &r, nullptr, nullptr, &imgs, &n, nullptr), ERNIE_ERR_INVALID);
  r.shift = 0;
  r.rng = "mt";
  EXPECT_EQ(ernie_generate(load_tiny(), &r, nullptr, nullptr, &imgs, &n, nullptr), ERNIE_ERR_INVALID);
  ernie_request b;
  ernie_request_init(&b);
  b.prompt = "a cat";
  b.width = b.height = 16;
  b.steps = 1;
  b.num_images = 2;
  b.seed = 7;
  ASSERT_EQ(ernie_generate(load_tiny(), &b, nullptr, nullptr, &imgs, &n, nullptr), ERNIE_OK) << ernie_last_error();
  ASSERT_EQ(n, 2);
  EXPECT_EQ(imgs[1].seed, 7u);  // rng cpu: one draw for the batch
  ernie_free_images(imgs, n);
  b.rng = "ernie";
  ASSERT_EQ(ernie_generate(load_tiny(), &b, nullptr, nullptr, &imgs, &n, nullptr), ERNIE_OK) << ernie_last_error();
  EXPECT_EQ(imgs[1].seed, 8u);  // rng ernie: seed + i
  ernie_free_images(imgs, n);
}

// seed -1 (ERNIE_SEED_RANDOM) is random, as on the command line and in the HTTP API: each result carries the
// seed drawn (32 bits, never -1 itself), and asking for that seed gives the same pixels.
TEST(CApi, SeedMinusOneIsRandom) {
  ernie_request r;
  ernie_request_init(&r);
  r.prompt = "a cat";
  r.width = r.height = 16;
  r.steps = 1;
  r.seed = static_cast<uint64_t>(-1);
  EXPECT_EQ(r.seed, ERNIE_SEED_RANDOM);
  ernie_image* a = nullptr;
  ernie_image* b = nullptr;
  ernie_image* c = nullptr;
  int n = 0;
  ASSERT_EQ(ernie_generate(load_tiny(), &r, nullptr, nullptr, &a, &n, nullptr), ERNIE_OK) << ernie_last_error();
  ASSERT_EQ(ernie_generate(load_tiny(), &r, nullptr, nullptr, &b, &n, nullptr), ERNIE_OK) << ernie_last_error();
  EXPECT_LE(a[0].seed, 0xffffffffull);
  EXPECT_NE(a[0].seed, b[0].seed);  // two draws of 32 bits
  r.seed = a[0].seed;
  ASSERT_EQ(ernie_generate(load_tiny(), &r, nullptr, nullptr, &c, &n, nullptr), ERNIE_OK) << ernie_last_error();
  EXPECT_EQ(c[0].seed, a[0].seed);
  const size_t bytes = size_t(a[0].width) * size_t(a[0].height) * 3;
  EXPECT_EQ(std::memcmp(a[0].data, c[0].data, bytes), 0) << "the reported seed does not reproduce the image";
  ernie_free_images(a, 1);
  ernie_free_images(b, 1);
  ernie_free_images(c, 1);
}

// LoRAs in the request: by path, by name in ernie_component_files.lora_dir, and as prompt tags, all the same
// adapter (its numbers against diffusers: test_lora); a struct_size, lora list or name the library does not
// take is ERNIE_ERR_INVALID naming it.
TEST(CApi, Loras) {
  const std::string dir = ernie::test::data_dir() + "/samplers-lora/lora";
  const std::string file = dir + "/tiny_lora.safetensors";
  ernie_options o;
  ernie_options_init(&o);
  const std::string model = ernie::test::tiny_model();
  o.model_dir = model.c_str();
  o.threads = 1;
  ernie_component_files files;
  ernie_component_files_init(&files);
  EXPECT_EQ(files.lora_dir, nullptr);
  files.lora_dir = dir.c_str();
  ernie_model* m = nullptr;
  ASSERT_EQ(ernie_load_components(&o, nullptr, &files, &m, nullptr), ERNIE_OK) << ernie_last_error();

  ernie_request r;
  ernie_request_init(&r);
  EXPECT_EQ(r.struct_size, sizeof(ernie_request));
  EXPECT_EQ(r.loras, nullptr);
  EXPECT_EQ(r.lora_count, 0);
  r.prompt = "a cat";
  r.width = 16;
  r.height = 24;
  r.steps = 2;
  r.seed = 3;
  auto pixels = [&](const ernie_request& q) { return generated_pixels(m, q); };
  const std::vector<uint8_t> base = pixels(r);
  const size_t ls = sizeof(ernie_lora);
  ernie_lora by_path = {ls, file.c_str(), nullptr, 0.6f}, by_name = {ls, nullptr, "tiny_lora", 0.6f};
  r.loras = &by_path;
  r.lora_count = 1;
  const std::vector<uint8_t> with = pixels(r);
  EXPECT_NE(with, base);
  r.loras = &by_name;
  EXPECT_EQ(pixels(r), with);
  r.loras = nullptr;
  r.lora_count = 0;
  r.prompt = "a cat <lora:tiny_lora:0.6>";
  EXPECT_EQ(pixels(r), with);
  r.prompt = "a cat";
  EXPECT_EQ(pixels(r), base);  // back to the exact base weights
  // A caller built against the first versioned request (no LoRA list) still works.
  ernie_request v1 = r;
  v1.struct_size = offsetof(ernie_request, loras);
  EXPECT_EQ(pixels(v1), base);

  auto invalid = [&](const ernie_request& q, const std::string& needle) { expect_invalid(m, q, needle); };
  ernie_request bad = r;
  bad.struct_size = 12;
  invalid(bad, "ernie_request.struct_size 12");
  bad = r;
  bad.lora_count = -1;
  invalid(bad, "lora_count -1");
  bad.lora_count = 1;  // loras NULL
  invalid(bad, "lora_count 1");
  ernie_lora both = {ls, file.c_str(), "tiny_lora", 1}, neither = {ls, nullptr, "", 1},
             nosuch = {ls, nullptr, "nosuch", 1}, nan = {ls, file.c_str(), nullptr, NAN};
  bad.loras = &both;
  invalid(bad, "set either path or name");
  bad.loras = &neither;
  invalid(bad, "set either path or name");
  bad.loras = &nosuch;
  invalid(bad, "tiny_lora");  // the error lists what the folder has
  bad.loras = &nan;
  invalid(bad, "scale");
  // ernie_lora_init, and a struct_size this library does not know (0: the caller skipped the init).
  ernie_lora init;
  ernie_lora_init(&init);
  EXPECT_EQ(init.struct_size, sizeof(ernie_lora));
  EXPECT_EQ(init.path, nullptr);
  EXPECT_EQ(init.name, nullptr);
  EXPECT_EQ(init.scale, 1.0f);
  init.name = "tiny_lora";
  init.scale = 0.6f;
  bad.loras = &init;
  EXPECT_EQ(pixels(bad), with);
  ernie_lora pair[2] = {init, init};
  pair[0].struct_size = 0;
  bad.loras = pair;
  bad.lora_count = 2;
  invalid(bad, "ernie_request.loras[0].struct_size 0: this library takes");
  pair[0].struct_size = ls;
  pair[1].struct_size = ls + 8;
  invalid(bad, "ernie_request.loras[1].struct_size");
  EXPECT_EQ(pixels(r), base);
  ernie_free(m);
}

// img2img and inpainting through the C API: the golden inpaint case (tests/data/img2img, case 3) gives the
// C++ engine's result; a mask as grey (1 channel) equals the RGB one; an RGBA init image ignores its alpha; a
// caller of the second version (no img2img fields) still works; bad images are ERNIE_ERR_INVALID naming them.
TEST(CApi, Img2img) {
  ernie_model* m = load_tiny();
  const ernie::GenerateRequest g = ernie::test::img2img_request(3);
  ernie_request r;
  ernie_request_init(&r);
  EXPECT_EQ(r.strength, -1.0f);
  EXPECT_EQ(r.init_image, nullptr);
  r.prompt = g.prompt.c_str();
  r.width = g.width;
  r.height = g.height;
  r.steps = g.steps;
  r.cfg = g.cfg;
  const std::vector<float> noise = g.init_latents->to_vector();
  r.init_latents = noise.data();
  r.init_latents_count = noise.size();
  ernie_image init{g.init_image->width, g.init_image->height, 3, const_cast<uint8_t*>(g.init_image->rgb.data()), 0};
  std::vector<uint8_t> grey(size_t(g.width) * g.height), rgba(grey.size() * 4);
  for (size_t i = 0; i < grey.size(); ++i) {
    grey[i] = g.mask->rgb[i * 3];
    for (int c = 0; c < 3; ++c) rgba[i * 4 + size_t(c)] = g.init_image->rgb[i * 3 + size_t(c)];
    rgba[i * 4 + 3] = uint8_t(i);  // ignored in an init image
  }
  ernie_image mask_rgb{g.width, g.height, 3, const_cast<uint8_t*>(g.mask->rgb.data()), 0};
  ernie_image mask_grey{g.width, g.height, 1, grey.data(), 0};
  ernie_image init_rgba{g.width, g.height, 4, rgba.data(), 0};
  r.init_image = &init;
  r.mask = &mask_rgb;
  auto pixels = [&](const ernie_request& q) { return generated_pixels(m, q); };
  // the same request through the C++ engine
  ernie::EngineOptions eo;
  eo.device = "cpu";
  eo.model = ernie::test::tiny_model();
  const std::vector<uint8_t> want = ernie::Engine::open(eo)->generate(g).images[0].rgb;
  EXPECT_EQ(pixels(r), want);
  r.mask = &mask_grey;
  EXPECT_EQ(pixels(r), want);
  r.init_image = &init_rgba;
  EXPECT_EQ(pixels(r), want);
  ernie_request v2 = r;  // the LoRA version: no img2img fields, so text-to-image from the same noise
  v2.struct_size = offsetof(ernie_request, init_image);
  EXPECT_NE(pixels(v2), want);

  auto invalid = [&](const ernie_request& q, const std::string& needle) { expect_invalid(m, q, needle); };
  ernie_request bad = r;
  ernie_image two{g.width, g.height, 2, rgba.data(), 0}, nodata{g.width, g.height, 3, nullptr, 0};
  bad.init_image = &two;
  invalid(bad, "init_image: channels 2");
  bad.init_image = &mask_grey;  // 1 channel: masks only
  invalid(bad, "init_image: channels 1");
  bad.init_image = &nodata;
  invalid(bad, "init_image");
  bad = r;
  bad.strength = 2;
  invalid(bad, "strength");
  bad = r;
  bad.init_image = nullptr;
  invalid(bad, "a mask needs an init image");
}
