// The decode-step kernels against their CPU twins, in F32 and BF16: add_rms_norm, qkv_rope (into KV-cache
// rows), linear_swiglu (the GEMV with the activation in its epilogue, and the fallback), the GEMV's grid of a
// few warps per column, the decode kernels launched as programmatic dependents (the default on Hopper), argmax, and the one-kernel
// split-key decode attention (GQA groups, chunk counts around its 64-key chunks, 1..4 query rows), and the two
// fusions the decoding step uses: add_rms_norm_linear and qkv_rope_attention.
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "gpu_util.h"
#include "ops/cpu/cpu_ops.h"

namespace ernie::test {
namespace {

TEST(CudaDecode, AddRmsNorm) {
  ERNIE_REQUIRE_GPU();
  FOR_DTYPES {
    for (int64_t rows : {1, 2, 3, 4, 37}) for (int64_t c : {3072, 4104, 9000, 13}) for (bool with_w : {true, false}) {
      SCOPED_TRACE("rows " + std::to_string(rows) + " c " + std::to_string(c) + (with_w ? " weight" : ""));
      Tensor x = as_dtype(rnd({rows, c}, 1, 2.f, 0.3f), dt), y = as_dtype(rnd({rows, c}, 2), dt);
      Tensor w = with_w ? as_dtype(rnd({c}, 3), dt) : Tensor();
      ops::SumNorm got = ops::add_rms_norm(up(x, dt), up(y, dt), with_w ? up(w, dt) : Tensor(), 1e-5f);
      // The CPU twin of what the GPU stores: the sum rounded to dt, normalised.
      Tensor sum = as_dtype(cpu::add(x, y), dt);
      EXPECT_TRUE(tensors_close(down(got.sum), sum, tol(dt, 1e-6, 5e-3), min_cos(dt)));
      EXPECT_TRUE(tensors_close(down(got.normed), cpu::rms_norm(sum, w, 1e-5f), tol(dt), min_cos(dt)));
    }
  }
}

TEST(CudaDecode, QkvRopeIntoCacheRows) {
  ERNIE_REQUIRE_GPU();
  FOR_DTYPES {
    // (B, S, Hq, Hkv, D, table rows): the PE's heads, an odd head_dim (scalar path), GQA 3:1, batch tables.
    struct Case { int64_t B, S, Hq, Hkv, D, tb; };
    const Case cases[] = {{1, 1, 32, 8, 128, 1}, {1, 5, 4, 2, 12, 1}, {2, 3, 6, 2, 16, 2}, {1, 4, 3, 1, 64, 1}};
    for (const Case& c : cases) {
      SCOPED_TRACE("B " + std::to_string(c.B) + " S " + std::to_string(c.S) + " Hq " + std::to_string(c.Hq) + " Hkv " +
                   std::to_string(c.Hkv) + " D " + std::to_string(c.D));
      const int64_t W = (c.Hq + 2 * c.Hkv) * c.D;
      Tensor qkv = as_dtype(rnd({c.B, c.S, W}, 10, 2.f), dt);
      Tensor cq = rnd({c.tb, c.S, c.D}, 11), sq = rnd({c.tb, c.S, c.D}, 12);
      Tensor ck = rnd({c.tb, c.S, c.D}, 13), sk = rnd({c.tb, c.S, c.D}, 14);
      ops::Qkv ref = cpu::qkv_rope(qkv, c.Hq, c.Hkv, cq, sq, ck, sk, {}, {});
      ops::Qkv got = ops::qkv_rope(up(qkv, dt), c.Hq, c.Hkv, cq.to(kGPU), sq.to(kGPU), ck.to(kGPU), sk.to(kGPU));
      EXPECT_TRUE(tensors_close(down(got.q), ref.q, tol(dt), min_cos(dt)));
      EXPECT_TRUE(tensors_close(down(got.k), ref.k, tol(dt), min_cos(dt)));
      EXPECT_TRUE(tensors_close(down(got.v), ref.v, 0));
      if (c.B != 1) continue;
      // Into rows [3, 3 + S) of a cache of 11 rows: those rows written, the rest left as they were (zeros).
      Tensor kc = Tensor::zeros({11, c.Hkv, c.D}, dt, kGPU), vc = Tensor::zeros({11, c.Hkv, c.D}, dt, kGPU);
      auto rows = [&](const Tensor& t) { return t.narrow(3, c.S).reshape({1, c.S, c.Hkv, c.D}); };
      ops::qkv_rope(up(qkv, dt), c.Hq, c.Hkv, cq.to(kGPU), sq.to(kGPU), ck.to(kGPU), sk.to(kGPU), rows(kc), rows(vc));
      EXPECT_TRUE(tensors_close(down(rows(kc)), ref.k, tol(dt), min_cos(dt)));
      EXPECT_TRUE(tensors_close(down(rows(vc)), ref.v, 0));
      for (float v : down(kc.narrow(0, 3)).to_vector()) ASSERT_EQ(v, 0.f);
      for (float v : down(vc.narrow(3 + c.S, 8 - c.S)).to_vector()) ASSERT_EQ(v, 0.f);
    }
  }
}

// 1..4 rows take the GEMV with the activation in its epilogue (K a multiple of the pack), 5 rows and K = 100
// the projection and then the activation kernel.
TEST(CudaDecode, LinearSwiglu) {
  ERNIE_REQUIRE_GPU();
  FOR_DTYPES {
    for (int64_t M : {1, 2, 3, 4, 5}) for (int64_t K : {3072, 100}) for (int64_t I : {1003, 64}) {
      SCOPED_TRACE("M " + std::to_string(M) + " K " + std::to_string(K) + " I " + std::to_string(I));
      Tensor x = as_dtype(rnd({1, M, K}, 20, 1.f), dt), w = as_dtype(rnd({2 * I, K}, 21, 0.05f), dt);
      // Each half of the projection rounded to dt as a stored linear output, then the activation.
      Tensor h = as_dtype(cpu::linear(x, w, {}), dt);
      Tensor ref = cpu::swiglu(cpu::slice(h, 2, 0, I), cpu::slice(h, 2, I, I));
      Tensor got = ops::linear_swiglu(up(x, dt), up(w, dt));
      EXPECT_TRUE(tensors_close(down(got), ref, tol(dt, 1e-5), min_cos(dt)));
    }
  }
  // An 8-bit weight: the quantized linear, then the activation kernel.
  Tensor x = as_dtype(rnd({2, 64}, 22), DType::BF16), w = rnd({80, 64}, 23, 0.05f);
  ops::Weight q = ops::quantize(w.to(kGPU), DType::I8);
  Tensor h = as_dtype(cpu::linear(x, down(ops::dequantize(q)), {}), DType::BF16);
  EXPECT_TRUE(tensors_close(down(ops::linear_swiglu(up(x, DType::BF16), q)),
                            cpu::swiglu(cpu::slice(h, 1, 0, 40), cpu::slice(h, 1, 40, 40)), 2e-2, 0.999));
  EXPECT_THROW(ops::linear_swiglu(up(x, DType::BF16), up(as_dtype(rnd({81, 64}, 24), DType::BF16), DType::BF16)),
               Error);
}

// The residual add and RMSNorm inside the projection (one kernel for one row with K a whole number of 2 KiB
// chunks on Hopper: K = 3072; K = 100 and two rows take the composition): the sum bit for bit as add_rms_norm
// stores it, the output as the projection of add_rms_norm's normed row (whose last bits may differ: the sum
// of squares adds up in another order), with and without y and the norm weight, plain and swiglu.
TEST(CudaDecode, AddRmsNormLinear) {
  ERNIE_REQUIRE_GPU();
  FOR_DTYPES {
    for (int64_t K : {3072, 100}) for (int64_t M : {1, 2}) for (bool with_y : {true, false})
      for (bool with_w : {true, false}) for (bool swiglu : {false, true}) {
        SCOPED_TRACE("K " + std::to_string(K) + " M " + std::to_string(M) + (with_y ? " y" : "") +
                     (with_w ? " weight" : "") + (swiglu ? " swiglu" : ""));
        const int64_t N = swiglu ? 2 * 1003 : 1003;
        Tensor x = as_dtype(rnd({M, K}, 80, 2.f, 0.3f), dt), y = with_y ? as_dtype(rnd({M, K}, 81), dt) : Tensor();
        Tensor nw = with_w ? as_dtype(rnd({K}, 82, 0.5f, 1.f), dt) : Tensor(), w = as_dtype(rnd({N, K}, 83, 0.05f), dt);
        Tensor gx = up(x, dt), gy = with_y ? up(y, dt) : Tensor(), gnw = with_w ? up(nw, dt) : Tensor(), gw = up(w, dt);
        ops::SumOut got = ops::add_rms_norm_linear(gx, gy, gnw, 1e-5f, gw, swiglu);
        Tensor sum = with_y ? ops::add_rms_norm(gx, gy, gnw, 1e-5f).sum : gx;
        EXPECT_EQ(down(got.sum).to_vector(), down(sum).to_vector());
        // The CPU twin from the stored sum: normalised, rounded to dt, projected (each swiglu half rounded).
        Tensor normed = as_dtype(cpu::rms_norm(down(sum), nw, 1e-5f), dt);
        Tensor ref = as_dtype(cpu::linear(normed, w, {}), dt);
        if (swiglu) ref = cpu::swiglu(cpu::slice(ref, 1, 0, N / 2), cpu::slice(ref, 1, N / 2, N / 2));
        EXPECT_TRUE(tensors_close(down(got.out), ref, tol(dt, 1e-5, 2e-2), min_cos(dt)));
      }
  }
}

// More columns than warps fit on the GPU at once: each warp takes several (strided in the register kernel, a
// contiguous run in the bulk-copy kernel that Hopper takes for rows of whole 2 KiB chunks in a matrix of up to
// 256 MiB: K = 1024 in bf16).
TEST(CudaDecode, GemvManyColumnsPerWarp) {
  ERNIE_REQUIRE_GPU();
  FOR_DTYPES {
    for (int64_t M : {1, 3}) for (int64_t K : {256, 1024}) {
      SCOPED_TRACE("K " + std::to_string(K));
      Tensor x = as_dtype(rnd({M, K}, 30), dt), w = as_dtype(rnd({70001, K}, 31, 0.05f), dt);
      Tensor b = as_dtype(rnd({70001}, 32), dt);
      EXPECT_TRUE(tensors_close(down(ops::linear(up(x, dt), up(w, dt), up(b, dt))), cpu::linear(x, w, b), tol(dt, 1e-5),
                                min_cos(dt)))
          << "M " << M;
    }
  }
}

// Programmatic dependent launch (on by default on Hopper): GEMVs right after the kernels that feed them (add_rms_norm,
// another GEMV, attention) still see their finished inputs; a chain like one MLP step, several times over.
TEST(CudaDecode, ProgrammaticDependentLaunchChain) {
  ERNIE_REQUIRE_GPU();
  const DType dt = DType::BF16;
  const int64_t C = 512, I = 1024;
  Tensor h = as_dtype(rnd({1, C}, 40, 1.f), dt), nw = as_dtype(rnd({C}, 41, 0.5f, 1.f), dt);
  Tensor wgu = as_dtype(rnd({2 * I, C}, 42, 0.05f), dt), wd = as_dtype(rnd({C, I}, 43, 0.05f), dt);
  Tensor gh = up(h, dt), gnw = up(nw, dt), gwgu = up(wgu, dt), gwd = up(wd, dt);
  Tensor ref_h = h;
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    Tensor delta = as_dtype(rnd({1, C}, 50 + step), dt);
    ops::SumNorm g = ops::add_rms_norm(gh, up(delta, dt), gnw, 1e-5f);
    Tensor out = ops::linear(ops::linear_swiglu(g.normed, gwgu), gwd);
    gh = g.sum;
    // The CPU twin from the GPU's own rounded intermediates, so only this step's error counts.
    Tensor normed = down(g.normed), gate_up = as_dtype(cpu::linear(normed, wgu, {}), dt);
    Tensor act = down(ops::linear_swiglu(g.normed, gwgu));
    EXPECT_TRUE(tensors_close(act, cpu::swiglu(cpu::slice(gate_up, 1, 0, I), cpu::slice(gate_up, 1, I, I)), 2e-2,
                              0.999));
    EXPECT_TRUE(tensors_close(down(g.sum), as_dtype(cpu::add(ref_h, delta), dt), 5e-3, 0.9999));
    EXPECT_TRUE(tensors_close(down(out), cpu::linear(act, wd, {}), 2e-2, 0.999));
    ref_h = down(g.sum);
  }
  // attention (the split-key decode kernel) -> GEMV.
  Tensor q = as_dtype(rnd({1, 1, 4, 64}, 60), dt), k = as_dtype(rnd({1, 300, 2, 64}, 61), dt);
  Tensor v = as_dtype(rnd({1, 300, 2, 64}, 62), dt), wo = as_dtype(rnd({C, 256}, 63, 0.05f), dt);
  Tensor attn = ops::attention(up(q, dt), up(k, dt), up(v, dt), 0.125f);
  Tensor o = ops::linear(attn.reshape({1, 256}), up(wo, dt));
  EXPECT_TRUE(tensors_close(down(o), cpu::linear(down(attn).reshape({1, 256}), wo, {}), 2e-2, 0.999));
}

// Greedy decoding's argmax: the first index of the largest value (ties planted across thread strides and at
// the ends), NaN an error.
TEST(CudaDecode, Argmax) {
  ERNIE_REQUIRE_GPU();
  FOR_DTYPES {
    for (int64_t rows : {1, 3}) for (int64_t n : {1, 33, 1000, 131072}) {
      SCOPED_TRACE("rows " + std::to_string(rows) + " n " + std::to_string(n));
      Tensor x = as_dtype(rnd({rows, n}, 70, 4.f), dt);
      float* v = x.f32();
      if (n > 4) v[n - 1] = v[n / 2] = v[3] = 9.f;  // row 0: three equal maxima, the first at 3
      if (rows > 1) v[n] = 9.f;                     // row 1: the max at its first index
      EXPECT_EQ(ops::argmax(up(x, dt)), cpu::argmax(x));
    }
    Tensor all_inf = Tensor::from_vector(std::vector<float>(100, -INFINITY), {1, 100});
    EXPECT_EQ(ops::argmax(up(all_inf, dt)), std::vector<int64_t>{0});
    Tensor nan = rnd({2, 700}, 71);
    nan.f32()[700 + 333] = NAN;
    EXPECT_THROW(ops::argmax(up(nan, dt)), Error);
  }
}

struct DecodeCase {
  int64_t B, Sq, Sk, Hq, Hkv, D;
  int64_t q_offset;  // causal from this position
  std::vector<int64_t> kv_len;
};

TEST(CudaDecode, AttentionSplitKeys) {
  ERNIE_REQUIRE_GPU();
  const std::vector<DecodeCase> cases = {
      {1, 1, 1, 32, 8, 128, 0, {}},             // one key
      {1, 1, 33, 32, 8, 128, 32, {}},           // one chunk (written by its block directly)
      {1, 1, 64, 32, 8, 128, 63, {}},           // exactly one chunk
      {1, 1, 65, 32, 8, 128, 64, {}},           // a second chunk of one key
      {1, 1, 128, 32, 8, 128, 127, {}},         // exactly two chunks
      {1, 1, 129, 32, 8, 128, 128, {}},         // a third chunk of one key
      {1, 1, 1100, 32, 8, 128, 1099, {}},       // the PE at ~1,100 keys
      {1, 1, 17000, 32, 8, 128, 16999, {}},     // more keys than 256 chunks of 64: longer chunks
      {1, 4, 300, 32, 8, 128, 296, {}},         // 4 query rows, causal
      {1, 2, 200, 24, 4, 128, 198, {}},         // groups of 6 query heads: two head chunks (4 + 2)
      {1, 3, 77, 8, 8, 64, 74, {}},             // no GQA
      {1, 1, 100, 12, 1, 12, 99, {}},           // odd head_dim 12 (the tiny PE), 12 heads on one kv head
      {2, 1, 130, 4, 2, 256, 1 << 20, {130, 0}},  // head_dim 256, an empty batch row
      {3, 2, 129, 4, 2, 128, 1 << 20, {128, 65, 129}},  // kv lengths at and around chunk edges
  };
  uint32_t seed = 200;
  FOR_DTYPES {
    for (const DecodeCase& c : cases) {
      SCOPED_TRACE("B " + std::to_string(c.B) + " Sq " + std::to_string(c.Sq) + " Sk " + std::to_string(c.Sk) + " Hq " +
                   std::to_string(c.Hq) + " Hkv " + std::to_string(c.Hkv) + " D " + std::to_string(c.D));
      Tensor q = as_dtype(rnd({c.B, c.Sq, c.Hq, c.D}, seed += 3, 2.f), dt);
      Tensor k = as_dtype(rnd({c.B, c.Sk, c.Hkv, c.D}, seed + 1, 2.f), dt);
      Tensor v = as_dtype(rnd({c.B, c.Sk, c.Hkv, c.D}, seed + 2), dt);
      ops::AttentionMask m;
      m.causal = c.q_offset < (1 << 20);
      m.q_offset = m.causal ? c.q_offset : 0;
      m.kv_len = c.kv_len;
      const float scale = 1.f / std::sqrt(float(c.D));
      Tensor ref = cpu::attention(q, k, v, scale, m);
      // Three times: the later launches find the chunk tickets reset by the first; the last one told that the
      // keys before the query position are stable (read before the previous kernel finishes).
      for (int run = 0; run < 3; ++run) {
        if (run == 2) m.stable_keys = m.causal ? std::min(c.Sk, m.q_offset) : c.Sk;
        EXPECT_TRUE(tensors_close(down(ops::attention(up(q, dt), up(k, dt), up(v, dt), scale, m)), ref,
                                  tol(dt, 1e-5, 1.5e-2), min_cos(dt)))
            << "run " << run;
      }
    }
  }
}

// One decoding step's RoPE, cache write and attention in the decode kernel, against the CPU's qkv_rope into
// the cache rows then attention: the output, the new cache row, and the rows before it untouched. Positions
// at and around the 64-key chunks, GQA groups of 4 and 6 (two head chunks), the tiny PE's head_dim 12.
TEST(CudaDecode, QkvRopeAttention) {
  ERNIE_REQUIRE_GPU();
  struct Case {
    int64_t Hq, Hkv, D, cap, pos;
  };
  const std::vector<Case> cases = {{32, 8, 128, 1200, 0},  {32, 8, 128, 1200, 63}, {32, 8, 128, 1200, 64},
                                   {32, 8, 128, 1200, 128},  {32, 8, 128, 1200, 1099}, {24, 4, 128, 300, 200}, {12, 1, 12, 100, 70}};
  uint32_t seed = 300;
  FOR_DTYPES {
    for (const Case& c : cases) {
      SCOPED_TRACE("Hq " + std::to_string(c.Hq) + " Hkv " + std::to_string(c.Hkv) + " D " + std::to_string(c.D) +
                   " pos " + std::to_string(c.pos));
      Tensor qkv = as_dtype(rnd({1, 1, (c.Hq + 2 * c.Hkv) * c.D}, seed += 5, 2.f), dt);
      Tensor kc = as_dtype(rnd({1, c.cap, c.Hkv, c.D}, seed + 1, 2.f), dt);
      Tensor vc = as_dtype(rnd({1, c.cap, c.Hkv, c.D}, seed + 2), dt);
      Tensor cs = rnd({1, 1, c.D}, seed + 3), sn = rnd({1, 1, c.D}, seed + 4);
      const float scale = 1.f / std::sqrt(float(c.D));
      Tensor gk = up(kc, dt), gv = up(vc, dt);
      Tensor got = ops::qkv_rope_attention(up(qkv, dt), c.Hq, c.Hkv, cs.to(kGPU), sn.to(kGPU), cs.to(kGPU),
                                           sn.to(kGPU), gk, gv, c.pos, scale);
      // The reference: the composition on the CPU (its new rows rounded to dt as the GPU stores them).
      Tensor rk = kc.clone(), rv = vc.clone();
      auto rows = [&](const Tensor& t, int64_t start, int64_t n) {
        return t.reshape({c.cap, c.Hkv, c.D}).narrow(start, n).reshape({1, n, c.Hkv, c.D});
      };
      ops::Qkv a = cpu::qkv_rope(qkv, c.Hq, c.Hkv, cs, sn, cs, sn, Tensor(), Tensor());
      std::memcpy(rows(rk, c.pos, 1).raw(), as_dtype(a.k, dt).raw(), a.k.nbytes());
      std::memcpy(rows(rv, c.pos, 1).raw(), as_dtype(a.v, dt).raw(), a.v.nbytes());
      ops::AttentionMask m;
      m.causal = true, m.q_offset = c.pos;
      Tensor ref = cpu::attention(as_dtype(a.q, dt), rows(rk, 0, c.pos + 1), rows(rv, 0, c.pos + 1), scale, m);
      EXPECT_TRUE(tensors_close(down(got), ref, tol(dt, 1e-5, 1.5e-2), min_cos(dt)));
      // The new row as stored, the others as they were (f32: the GPU's RoPE may fuse its multiply-adds).
      EXPECT_TRUE(tensors_close(down(gk), rk, tol(dt, 1e-6, 1e-2), min_cos(dt)));
      EXPECT_EQ(down(gv).to_vector(), rv.to_vector());
    }
  }
}

}  // namespace
}  // namespace ernie::test
