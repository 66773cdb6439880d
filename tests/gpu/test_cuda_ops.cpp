// Every op of the CUDA backend against its CPU twin on random inputs, in F32 and BF16 activations.
#include <cstdlib>

#include "core/error.h"
#include "gpu_util.h"
#include "ops/cpu/cpu_ops.h"

namespace ernie::test {
namespace {

TEST(CudaOps, Linear) {
  ERNIE_REQUIRE_GPU();
  FOR_DTYPES {
    for (bool with_bias : {false, true}) {
      Tensor x = as_dtype(rnd({2, 77, 96}, 1), dt), w = as_dtype(rnd({40, 96}, 2, 0.2f), dt);
      Tensor b = with_bias ? as_dtype(rnd({40}, 3), dt) : Tensor();
      Tensor ref = cpu::linear(x, w, b);
      Tensor got = ops::linear(up(x, dt), up(w, dt), with_bias ? up(b, dt) : Tensor());
      EXPECT_EQ(got.dtype(), dt);
      EXPECT_TRUE(tensors_close(down(got), ref, tol(dt, 1e-5), min_cos(dt)));
    }
  }
}

// A few rows (decoding) go through the GEMV kernel when K is a multiple of the pack (3072), else cuBLASLt (100);
// column counts that do and do not fill the last block of 8 warps.
TEST(CudaOps, LinearFewRows) {
  ERNIE_REQUIRE_GPU();
  FOR_DTYPES {
    for (int64_t N : {1003, 4500})
      for (int64_t M : {1, 2, 3, 4, 5})
        for (int64_t K : {3072, 100})
          for (bool with_bias : {false, true}) {
            Tensor x = as_dtype(rnd({1, M, K}, 11), dt), w = as_dtype(rnd({N, K}, 12, 0.05f), dt);
            Tensor b = with_bias ? as_dtype(rnd({N}, 13), dt) : Tensor();
            Tensor got = ops::linear(up(x, dt), up(w, dt), with_bias ? up(b, dt) : Tensor());
            EXPECT_TRUE(tensors_close(down(got), cpu::linear(x, w, b), tol(dt, 1e-5), min_cos(dt)))
                << "N=" << N << " M=" << M << " K=" << K << (with_bias ? " bias" : "");
          }
  }
}

TEST(CudaOps, LinearLargeAndMixedWeightDtype) {
  ERNIE_REQUIRE_GPU();
  Tensor x = as_dtype(rnd({300, 512}, 4), DType::BF16), w = as_dtype(rnd({384, 512}, 5, 0.05f), DType::BF16);
  Tensor b = as_dtype(rnd({384}, 6), DType::BF16);
  Tensor ref = cpu::linear(x, w, b);
  // F32 activations with a BF16 weight (converted on the fly) and BF16 everything.
  EXPECT_TRUE(tensors_close(down(ops::linear(up(x, DType::F32), up(w, DType::BF16), up(b, DType::F32))), ref, 1e-5));
  EXPECT_TRUE(tensors_close(down(ops::linear(up(x, DType::BF16), up(w, DType::BF16), up(b, DType::BF16))), ref, 1e-2,
                            0.9999));
}

TEST(CudaOps, Norms) {
  ERNIE_REQUIRE_GPU();
  FOR_DTYPES {
    for (int64_t c : {int64_t(16), int64_t(100), int64_t(4096)}) for (int64_t s : {int64_t(1), int64_t(5), int64_t(70)}) {
      // 3 and 15 rows: a block per row (rms_norm); 210: a warp per row
      Tensor x = as_dtype(rnd({3, s, c}, 7, 2.f, 0.5f), dt), w = as_dtype(rnd({c}, 8), dt), b = as_dtype(rnd({c}, 9), dt);
      EXPECT_TRUE(tensors_close(down(ops::rms_norm(up(x, dt), up(w, dt), 1e-6f)), cpu::rms_norm(x, w, 1e-6f), tol(dt),
                                min_cos(dt)));
      EXPECT_TRUE(tensors_close(down(ops::rms_norm(up(x, dt), Tensor(), 1e-5f)), cpu::rms_norm(x, Tensor(), 1e-5f),
                                tol(dt), min_cos(dt)));
      EXPECT_TRUE(tensors_close(down(ops::layer_norm(up(x, dt), up(w, dt), up(b, dt), 1e-5f)),
                                cpu::layer_norm(x, w, b, 1e-5f), tol(dt), min_cos(dt)));
      EXPECT_TRUE(tensors_close(down(ops::layer_norm(up(x, dt), Tensor(), Tensor(), 1e-6f)),
                                cpu::layer_norm(x, Tensor(), Tensor(), 1e-6f), tol(dt), min_cos(dt)));
    }
    // An F32 weight with BF16 activations (weights of any float dtype are accepted).
    Tensor x = as_dtype(rnd({4, 64}, 10), dt), w = rnd({64}, 11);
    EXPECT_TRUE(tensors_close(down(ops::rms_norm(up(x, dt), w.to(kGPU), 1e-6f)), cpu::rms_norm(x, w, 1e-6f), tol(dt),
                              min_cos(dt)));
  }
}

TEST(CudaOps, GroupNormSmallAndMultiChunk) {
  ERNIE_REQUIRE_GPU();
  FOR_DTYPES {
    struct Case {
      Shape s;
      int groups;
    };
    for (const Case& c : {Case{{2, 8, 5, 7}, 4}, Case{{1, 64, 128, 128}, 32}, Case{{1, 32, 256, 256}, 8}}) {
      const int64_t C = c.s[1];
      Tensor x = as_dtype(rnd(c.s, 12, 3.f, 1.5f), dt), w = as_dtype(rnd({C}, 13), dt), b = as_dtype(rnd({C}, 14), dt);
      for (bool silu : {false, true}) {
        EXPECT_TRUE(tensors_close(down(ops::group_norm(up(x, dt), c.groups, up(w, dt), up(b, dt), 1e-6f, silu)),
                                  cpu::group_norm(x, c.groups, w, b, 1e-6f, silu), tol(dt, 5e-5), min_cos(dt)));
      }
    }
  }
}

TEST(CudaOps, Elementwise) {
  ERNIE_REQUIRE_GPU();
  FOR_DTYPES for (const Shape& shape : {Shape{3, 7, 33}, Shape{2, 5, 64}}) {  // scalar and 16-byte paths
    Tensor a = as_dtype(rnd(shape, 15, 4.f), dt), b = as_dtype(rnd(shape, 16, 4.f), dt);
    Tensor ga = up(a, dt), gb = up(b, dt);
    EXPECT_TRUE(tensors_close(down(ops::silu(ga)), cpu::silu(a), tol(dt), min_cos(dt)));
    EXPECT_TRUE(tensors_close(down(ops::gelu(ga)), cpu::gelu(a), tol(dt), min_cos(dt)));
    EXPECT_TRUE(tensors_close(down(ops::add(ga, gb)), cpu::add(a, b), tol(dt), min_cos(dt)));
    EXPECT_TRUE(tensors_close(down(ops::mul(ga, gb)), cpu::mul(a, b), tol(dt), min_cos(dt)));
    EXPECT_TRUE(tensors_close(down(ops::scale(ga, -0.37f)), cpu::scale(a, -0.37f), tol(dt), min_cos(dt)));
    EXPECT_TRUE(tensors_close(down(ops::clamp(ga, -1.f, 1.5f)), cpu::clamp(a, -1.f, 1.5f), tol(dt), min_cos(dt)));
    EXPECT_TRUE(tensors_close(down(ops::swiglu(ga, gb)), cpu::swiglu(a, b), tol(dt), min_cos(dt)));
    EXPECT_TRUE(tensors_close(down(ops::geglu(ga, gb)), cpu::geglu(a, b), tol(dt), min_cos(dt)));
  }
}

TEST(CudaOps, ModulateAndGatedResidual) {
  ERNIE_REQUIRE_GPU();
  FOR_DTYPES {
    for (int64_t vb : {int64_t(2), int64_t(1)}) {
      Tensor x = as_dtype(rnd({2, 9, 40}, 17), dt), y = as_dtype(rnd({2, 9, 40}, 18), dt);
      Tensor shift = as_dtype(rnd({vb, 40}, 19), dt), scl = as_dtype(rnd({vb, 40}, 20), dt),
             gate = as_dtype(rnd({vb, 40}, 21), dt);
      EXPECT_TRUE(tensors_close(down(ops::modulate(up(x, dt), up(shift, dt), up(scl, dt))), cpu::modulate(x, shift, scl),
                                tol(dt), min_cos(dt)));
      EXPECT_TRUE(tensors_close(down(ops::gated_residual(up(x, dt), up(gate, dt), up(y, dt))),
                                cpu::gated_residual(x, gate, y), tol(dt), min_cos(dt)));
    }
  }
}

// qkv_norm_rope on CUDA against the CPU composition: q, k, v [B, S, H, D] stacked, tables with tb rows.
void check_qkv_norm_rope(int64_t B, int64_t S, int64_t H, int64_t D, int64_t tb, bool norms, DType dt) {
  SCOPED_TRACE("B " + std::to_string(B) + " S " + std::to_string(S) + " H " + std::to_string(H) + " D " +
               std::to_string(D) + " table rows " + std::to_string(tb) + (norms ? " norms" : ""));
  Tensor q = as_dtype(rnd({B, S, H, D}, 64, 2.f), dt), k = as_dtype(rnd({B, S, H, D}, 65, 2.f), dt),
         v = as_dtype(rnd({B, S, H, D}, 66), dt);
  Tensor nq = norms ? as_dtype(rnd({D}, 67), dt) : Tensor(), nk = norms ? as_dtype(rnd({D}, 68), dt) : Tensor();
  Tensor cs = rnd({tb, S, D}, 69), sn = rnd({tb, S, D}, 70);
  Tensor qkv = cpu::concat({q.reshape({B, S, H * D}), k.reshape({B, S, H * D}), v.reshape({B, S, H * D})}, 2);
  ops::Qkv got = ops::qkv_norm_rope(up(qkv, dt), H, norms ? up(nq, dt) : Tensor(), norms ? up(nk, dt) : Tensor(),
                                    1e-6f, cs.to(kGPU), sn.to(kGPU));
  Tensor rq = norms ? cpu::rms_norm(q, nq, 1e-6f) : q, rk = norms ? cpu::rms_norm(k, nk, 1e-6f) : k;
  EXPECT_TRUE(tensors_close(down(got.q), cpu::rope(rq, cs, sn), tol(dt), min_cos(dt)));
  EXPECT_TRUE(tensors_close(down(got.k), cpu::rope(rk, cs, sn), tol(dt), min_cos(dt)));
  EXPECT_TRUE(tensors_close(down(got.v), v, 0));
}

// The fused DiT ops against the composition of the CPU twins (the fused kernel for head_dim 128 and
// 16-byte rows; head_dim 64 and a 12-wide row take the composed fallback).
TEST(CudaOps, FusedNormModulateAndQkvRope) {
  ERNIE_REQUIRE_GPU();
  FOR_DTYPES {
    for (int64_t vb : {int64_t(2), int64_t(1)}) for (int64_t c : {int64_t(4096), int64_t(12)}) {
      Tensor x = as_dtype(rnd({2, 9, c}, 60, 2.f, 0.5f), dt), w = as_dtype(rnd({c}, 61), dt);
      Tensor shift = as_dtype(rnd({vb, c}, 62), dt), scl = as_dtype(rnd({vb, c}, 63), dt);
      EXPECT_TRUE(tensors_close(down(ops::rms_norm_modulate(up(x, dt), up(w, dt), 1e-6f, up(shift, dt), up(scl, dt))),
                                cpu::modulate(cpu::rms_norm(x, w, 1e-6f), shift, scl), tol(dt), min_cos(dt)));
    }
    for (int64_t D : {int64_t(128), int64_t(64)}) for (int64_t tb : {int64_t(2), int64_t(1)}) for (bool norms : {true, false})
      check_qkv_norm_rope(2, 11, 3, D, tb, norms, dt);
    // The DiT's 32 heads (whole chunks of heads per warp) and 5 (a partial one).
    for (int64_t H : {int64_t(32), int64_t(5)})
      for (bool norms : {true, false}) check_qkv_norm_rope(1, 37, H, 128, 1, norms, dt);
  }
}

TEST(CudaOps, Rope) {
  ERNIE_REQUIRE_GPU();
  FOR_DTYPES {
    for (int64_t tb : {int64_t(1), int64_t(2)}) for (int64_t D : {int64_t(16), int64_t(12)}) {
      Tensor x = as_dtype(rnd({2, 7, 3, D}, 22), dt);
      Tensor cs = rnd({tb, 7, D}, 23), sn = rnd({tb, 7, D}, 24);
      EXPECT_TRUE(tensors_close(down(ops::rope(up(x, dt), cs.to(kGPU), sn.to(kGPU))), cpu::rope(x, cs, sn), tol(dt),
                                min_cos(dt)));
    }
  }
}

struct AttnCase {
  int64_t B, Sq, Sk, Hq, Hkv, D;
  bool causal;
  int64_t q_offset;
  std::vector<int64_t> kv_len;
};

void check_attention(const AttnCase& c, DType dt, uint32_t seed) {
  SCOPED_TRACE("B " + std::to_string(c.B) + " Sq " + std::to_string(c.Sq) + " Sk " + std::to_string(c.Sk) + " Hq " +
               std::to_string(c.Hq) + " Hkv " + std::to_string(c.Hkv) + " D " + std::to_string(c.D) +
               (c.causal ? " causal" : ""));
  Tensor q = as_dtype(rnd({c.B, c.Sq, c.Hq, c.D}, seed, 2.f), dt);
  Tensor k = as_dtype(rnd({c.B, c.Sk, c.Hkv, c.D}, seed + 1, 2.f), dt);
  Tensor v = as_dtype(rnd({c.B, c.Sk, c.Hkv, c.D}, seed + 2), dt);
  ops::AttentionMask m;
  m.causal = c.causal;
  m.q_offset = c.q_offset;
  m.kv_len = c.kv_len;
  const float scale = 1.f / std::sqrt(float(c.D));
  Tensor ref = cpu::attention(q, k, v, scale, m);
  Tensor got = ops::attention(up(q, dt), up(k, dt), up(v, dt), scale, m);
  EXPECT_TRUE(tensors_close(down(got), ref, tol(dt, 1e-5, 1.5e-2), min_cos(dt)));
}

TEST(CudaOps, AttentionFlashAndSimple) {
  ERNIE_REQUIRE_GPU();
  const std::vector<AttnCase> cases = {
      {2, 100, 100, 4, 4, 128, false, 0, {100, 37}},   // DiT-like: padding mask per batch row
      {1, 300, 517, 8, 2, 128, false, 0, {}},           // several key tiles, a ragged last one, GQA
      {3, 129, 260, 2, 2, 128, false, 0, {0, 260, 131}},  // an empty row, a full one, one key past a tile
      {1, 200, 200, 8, 2, 128, true, 0, {}},            // text encoder: causal, GQA
      {1, 1, 50, 4, 1, 128, true, 49, {50}},            // decoding one token against a cache
      {1, 1, 1100, 32, 8, 128, true, 1099, {1100}},     // decoding: many key chunks, the PE's heads
      {2, 4, 300, 4, 2, 64, false, 0, {300, 0}},        // a few rows, an empty batch row
      {1, 2, 130, 2, 1, 256, true, 128, {}},            // head_dim 256, a ragged last chunk
      {1, 3, 40, 4, 2, 64, true, 30, {}},               // causal at an offset
      {2, 70, 130, 2, 2, 64, false, 0, {0, 129}},       // an empty row (zeros) and a ragged one
      {2, 65, 65, 3, 3, 32, false, 0, {}},
      {1, 33, 33, 4, 2, 16, true, 0, {}},
      {2, 21, 21, 4, 4, 12, false, 0, {21, 5}},         // head_dim 12: the simple kernel
  };
  uint32_t seed = 100;
  FOR_DTYPES {
    for (const AttnCase& c : cases) check_attention(c, dt, seed += 3);
  }
  // Heads wider than the kernels take (the VAE's single 512-wide head) go through cuBLASLt.
  FOR_DTYPES {
    check_attention({1, 300, 300, 1, 1, 512, false, 0, {}}, dt, seed += 3);
    check_attention({2, 64, 80, 2, 1, 320, true, 16, {80, 50}}, dt, seed += 3);
  }
  // The GEMM path on every case.
  setenv("ERNIE_ATTENTION", "gemm", 1);
  FOR_DTYPES {
    for (const AttnCase& c : cases) check_attention(c, dt, seed += 3);
  }
  unsetenv("ERNIE_ATTENTION");
  // The 32-keys-per-tile variant of the head_dim-128 flash kernel.
  setenv("ERNIE_FLASH_BC", "32", 1);
  for (const AttnCase& c : cases) check_attention(c, DType::BF16, seed += 3);
  unsetenv("ERNIE_FLASH_BC");
  // The mma.sync flash kernel where the Hopper wgmma kernel would run.
  setenv("ERNIE_ATTENTION", "mma", 1);
  for (const AttnCase& c : cases) check_attention(c, DType::BF16, seed += 3);
  unsetenv("ERNIE_ATTENTION");
  // The simple kernel on the shapes the flash kernel normally takes.
  setenv("ERNIE_ATTENTION", "simple", 1);
  for (const AttnCase& c : cases) check_attention(c, DType::BF16, seed += 3);
  unsetenv("ERNIE_ATTENTION");
}

TEST(CudaOps, AttentionLongSequence) {
  ERNIE_REQUIRE_GPU();
  check_attention({1, 1100, 1100, 2, 2, 128, false, 0, {1030}}, DType::BF16, 7);
  check_attention({2, 4296, 4296, 4, 4, 128, false, 0, {4296, 4100}}, DType::BF16, 8);
}

// Packed segments (block-diagonal, one call per segment on views of its rows) on every kernel path, and the
// DiT's cfg pair (a 200-token prompt and a one-token negative at 1024²).
TEST(CudaOps, AttentionPackedSegments) {
  ERNIE_REQUIRE_GPU();
  auto check = [](const std::vector<int64_t>& segments, int64_t H, int64_t Hkv, DType dt, uint32_t seed) {
    int64_t S = 0;
    for (int64_t L : segments) S += L;
    SCOPED_TRACE("S " + std::to_string(S) + " " + dtype_name(dt));
    Tensor q = as_dtype(rnd({1, S, H, 128}, seed, 2.f), dt), k = as_dtype(rnd({1, S, Hkv, 128}, seed + 1, 2.f), dt);
    Tensor v = as_dtype(rnd({1, S, Hkv, 128}, seed + 2), dt);
    ops::AttentionMask m;
    m.segments = segments;
    const float scale = 1.f / std::sqrt(128.f);
    EXPECT_TRUE(tensors_close(down(ops::attention(up(q, dt), up(k, dt), up(v, dt), scale, m)),
                              cpu::attention(q, k, v, scale, m), tol(dt, 1e-5, 1.5e-2), min_cos(dt)));
  };
  for (const char* path : {"", "gemm", "mma", "simple"}) {
    SCOPED_TRACE(std::string("path ") + path);
    setenv("ERNIE_ATTENTION", path, 1);
    FOR_DTYPES check({300, 1, 517}, 8, 2, dt, 200);
  }
  unsetenv("ERNIE_ATTENTION");
  check({4296, 4097}, 4, 4, DType::BF16, 210);
}

TEST(CudaOps, Conv2dCudnnAndIm2col) {
  ERNIE_REQUIRE_GPU();
  struct Case {
    Shape x, w;
    int stride, pad;
  };
  const std::vector<Case> cases = {{{2, 8, 17, 19}, {12, 8, 3, 3}, 1, 1},
                                   {{1, 6, 16, 16}, {8, 6, 3, 3}, 2, 0},
                                   {{2, 16, 9, 9}, {4, 16, 1, 1}, 1, 0},
                                   {{1, 16, 20, 24}, {3, 16, 3, 3}, 1, 1},   // fewer than 8 outputs: padded filters
                                   {{1, 8, 18, 18}, {16, 8, 3, 3}, 1, 1},   // output-channel groups (below)
                                   {{2, 8, 16, 16}, {12, 8, 3, 3}, 1, 1}};  // planes of 256: the packed bias add
  // "groups": a batch of one in output-channel groups, as large VAE convolutions run.
  for (const char* mode : {"", "im2col", "groups"}) {
    SCOPED_TRACE(std::string("mode ") + mode);
    setenv("ERNIE_CONV", mode, 1);
    if (std::string(mode) == "groups") setenv("ERNIE_CONV_GROUP_BYTES", "1", 1);
    FOR_DTYPES {
      for (const Case& c : cases) {
        Tensor x = as_dtype(rnd(c.x, 30), dt), w = as_dtype(rnd(c.w, 31, 0.3f), dt), b = as_dtype(rnd({c.w[0]}, 32), dt);
        EXPECT_TRUE(tensors_close(down(ops::conv2d(up(x, dt), up(w, dt), up(b, dt), c.stride, c.pad)),
                                  cpu::conv2d(x, w, b, c.stride, c.pad), tol(dt, 1e-5), min_cos(dt)));
      }
    }
    unsetenv("ERNIE_CONV_GROUP_BYTES");
  }
  unsetenv("ERNIE_CONV");
}

TEST(CudaOps, Layout) {
  ERNIE_REQUIRE_GPU();
  FOR_DTYPES {
    Tensor x = as_dtype(rnd({2, 3, 4, 5}, 40), dt), y = as_dtype(rnd({2, 2, 4, 5}, 41), dt);
    Tensor gx = up(x, dt), gy = up(y, dt);
    // Layout ops move bytes: results are exact.
    EXPECT_TRUE(tensors_close(down(ops::permute(gx, {0, 2, 3, 1})), cpu::permute(x, {0, 2, 3, 1}), 0));
    EXPECT_TRUE(tensors_close(down(ops::permute(gx, {3, 1, 0, 2})), cpu::permute(x, {3, 1, 0, 2}), 0));
    EXPECT_TRUE(tensors_close(down(ops::concat({gx, gy}, 1)), cpu::concat({x, y}, 1), 0));
    EXPECT_TRUE(tensors_close(down(ops::concat({gx, gx}, -1)), cpu::concat({x, x}, -1), 0));
    EXPECT_TRUE(tensors_close(down(ops::slice(gx, 2, 1, 2)), cpu::slice(x, 2, 1, 2), 0));
    EXPECT_TRUE(tensors_close(down(ops::slice(gx, 0, 1, 1)), cpu::slice(x, 0, 1, 1), 0));
    EXPECT_TRUE(tensors_close(down(ops::pad2d(gx, 1, 2, 0, 3)), cpu::pad2d(x, 1, 2, 0, 3), 0));
    EXPECT_TRUE(tensors_close(down(ops::upsample_nearest2x(gx)), cpu::upsample_nearest2x(x), 0));
    Tensor z = as_dtype(rnd({2, 3, 4, 8}, 44), dt);  // rows of 8: the 16-byte packed kernel
    EXPECT_TRUE(tensors_close(down(ops::upsample_nearest2x(up(z, dt))), cpu::upsample_nearest2x(z), 0));
    // Casts round to the target type exactly as the host does.
    Tensor f = rnd({1000}, 42, 100.f);
    EXPECT_TRUE(tensors_close(down(ops::cast(f.to(kGPU), DType::BF16)), f.cast(DType::BF16).to_f32(), 0));
    EXPECT_TRUE(tensors_close(down(ops::cast(f.to(kGPU), DType::F16)), f.cast(DType::F16).to_f32(), 0));
  }
}

TEST(CudaOps, Embedding) {
  ERNIE_REQUIRE_GPU();
  Tensor table = rnd({50, 24}, 43).cast(DType::BF16);
  const std::vector<int64_t> ids = {3, 0, 49, 3, 17};
  Tensor ref = cpu::embedding(table, ids);
  FOR_DTYPES {
    EXPECT_TRUE(tensors_close(down(ops::embedding(table, ids, kGPU, dt)), ref, 0));            // host table
    EXPECT_TRUE(tensors_close(down(ops::embedding(table.to(kGPU), ids, kGPU, dt)), ref, 0));   // device table
  }
  EXPECT_THROW(ops::embedding(table.to(kGPU), {50}, kGPU, DType::BF16), Error);
}

TEST(CudaOps, BadInputsGiveErrors) {
  ERNIE_REQUIRE_GPU();
  Tensor x = rnd({4, 8}, 50).to(kGPU), w = rnd({3, 7}, 51).to(kGPU);
  EXPECT_THROW(ops::linear(x, w), Error);
  EXPECT_THROW(ops::linear(x, rnd({3, 8}, 52)), Error);  // weight on the host
  EXPECT_THROW(ops::add(x, rnd({4, 9}, 53).to(kGPU)), Error);
  EXPECT_THROW(ops::group_norm(rnd({1, 6, 2, 2}, 54).to(kGPU), 4, Tensor(), Tensor(), 1e-6f), Error);
}

TEST(CudaMemory, OutOfMemoryIsAnErrorAndTheProcessGoesOn) {
  ERNIE_REQUIRE_GPU();
  try {
    Tensor::empty({int64_t(1) << 50}, DType::U8, kGPU);
    FAIL() << "a 1 PiB allocation succeeded";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("asked for"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("free"), std::string::npos) << e.what();
  }
  Tensor t = rnd({1024}, 55).to(kGPU);
  EXPECT_TRUE(tensors_close(down(ops::scale(t, 2.f)), cpu::scale(rnd({1024}, 55), 2.f), 0));
}

TEST(CudaMemory, CachingAllocatorReusesFreedBlocks) {
  ERNIE_REQUIRE_GPU();
  cuda::synchronize(0);
  { Tensor a = Tensor::empty({3 << 20}, DType::F32, kGPU); }
  const size_t reserved = cuda::memory_stats(0).reserved_bytes;
  { Tensor b = Tensor::empty({3 << 20}, DType::F32, kGPU); }
  EXPECT_EQ(cuda::memory_stats(0).reserved_bytes, reserved);
}

}  // namespace
}  // namespace ernie::test
