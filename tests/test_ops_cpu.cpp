// CPU backend of the op set against naive double-precision loops on small random inputs, and the
// shape/dtype errors it must raise.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "golden.h"
#include "ops/cpu/cpu_ops.h"

namespace ernie {
namespace {

using test::tensors_close;
constexpr double kTol = 1e-5;

Tensor rnd(const Shape& s, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<size_t>(shape_numel(s)));
  for (float& x : v) x = u(g);
  return Tensor::from_vector(v, s);
}
// Reference results are computed in double and stored as F32.
Tensor ref(const std::vector<double>& v, const Shape& s) {
  return Tensor::from_vector(std::vector<float>(v.begin(), v.end()), s);
}
std::vector<double> vals(const Tensor& t) {  // exact f32 values of any float tensor
  auto f = t.to_vector();
  return std::vector<double>(f.begin(), f.end());
}
double silu_d(double v) { return v / (1 + std::exp(-v)); }
double gelu_d(double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }

void check_linear(int64_t m, int64_t in, int64_t out, DType wt, bool with_bias) {
  Tensor x = rnd({m, in}, 1), w = rnd({out, in}, 2).cast(wt), b = with_bias ? rnd({out}, 3).cast(wt) : Tensor();
  auto X = vals(x), W = vals(w), Bv = with_bias ? vals(b) : std::vector<double>();
  std::vector<double> r(static_cast<size_t>(m * out));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t o = 0; o < out; ++o) {
      double s = with_bias ? Bv[size_t(o)] : 0;
      for (int64_t k = 0; k < in; ++k) s += X[size_t(i * in + k)] * W[size_t(o * in + k)];
      r[size_t(i * out + o)] = s;
    }
  EXPECT_TRUE(tensors_close(cpu::linear(x, w, b), ref(r, {m, out}), kTol)) << dtype_name(wt);
}

TEST(OpsCpu, LinearF32Bias) { check_linear(5, 33, 17, DType::F32, true); }
TEST(OpsCpu, LinearBf16NoBias) { check_linear(4, 40, 9, DType::BF16, false); }
TEST(OpsCpu, LinearF16ManyRowBlocks) { check_linear(6, 2048, 2100, DType::F16, true); }  // > one scratch block
TEST(OpsCpu, LinearFewRowsConvertAndDot) {  // the decoding path: up to 4 rows of x with BF16/F16 weights
  check_linear(1, 300, 70, DType::BF16, true);
  check_linear(4, 129, 33, DType::F16, false);
  check_linear(5, 129, 33, DType::BF16, true);  // first size on the blocked sgemm path
}
TEST(OpsCpu, LinearKeepsLeadingDims) {
  Tensor y = cpu::linear(rnd({2, 3, 8}, 1), rnd({5, 8}, 2), {});
  EXPECT_EQ(y.shape(), (Shape{2, 3, 5}));
}

TEST(OpsCpu, RmsNorm) {
  Tensor x = rnd({3, 4, 24}, 4), w = rnd({24}, 5).cast(DType::BF16);
  auto X = vals(x), W = vals(w);
  std::vector<double> r(X.size()), r2(X.size());
  for (size_t row = 0; row < 12; ++row) {
    double ss = 0;
    for (size_t i = 0; i < 24; ++i) ss += X[row * 24 + i] * X[row * 24 + i];
    double inv = 1 / std::sqrt(ss / 24 + 1e-5);
    for (size_t i = 0; i < 24; ++i) r[row * 24 + i] = X[row * 24 + i] * inv * W[i], r2[row * 24 + i] = X[row * 24 + i] * inv;
  }
  EXPECT_TRUE(tensors_close(cpu::rms_norm(x, w, 1e-5f), ref(r, x.shape()), kTol));
  EXPECT_TRUE(tensors_close(cpu::rms_norm(x, {}, 1e-5f), ref(r2, x.shape()), kTol));
}

TEST(OpsCpu, LayerNorm) {
  Tensor x = rnd({5, 16}, 6, -2, 3), w = rnd({16}, 7), b = rnd({16}, 8);
  auto X = vals(x), W = vals(w), Bv = vals(b);
  std::vector<double> r(X.size()), r2(X.size());
  for (size_t row = 0; row < 5; ++row) {
    double m = 0, v = 0;
    for (size_t i = 0; i < 16; ++i) m += X[row * 16 + i] / 16;
    for (size_t i = 0; i < 16; ++i) v += (X[row * 16 + i] - m) * (X[row * 16 + i] - m) / 16;
    for (size_t i = 0; i < 16; ++i) {
      double n = (X[row * 16 + i] - m) / std::sqrt(v + 1e-6);
      r[row * 16 + i] = n * W[i] + Bv[i];
      r2[row * 16 + i] = n;
    }
  }
  EXPECT_TRUE(tensors_close(cpu::layer_norm(x, w, b, 1e-6f), ref(r, x.shape()), kTol));
  EXPECT_TRUE(tensors_close(cpu::layer_norm(x, {}, {}, 1e-6f), ref(r2, x.shape()), kTol));
}

TEST(OpsCpu, GroupNormWithAndWithoutSilu) {
  const int64_t B = 2, C = 6, H = 3, W = 5, G = 3;
  Tensor x = rnd({B, C, H, W}, 9, -1, 2), w = rnd({C}, 10), b = rnd({C}, 11);
  auto X = vals(x), Wv = vals(w), Bv = vals(b);
  std::vector<double> r(X.size()), rs(X.size());
  const int64_t len = C / G * H * W;
  for (int64_t n = 0; n < B * G; ++n) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < len; ++i) m += X[size_t(n * len + i)] / double(len);
    for (int64_t i = 0; i < len; ++i) v += std::pow(X[size_t(n * len + i)] - m, 2) / double(len);
    for (int64_t i = 0; i < len; ++i) {
      int64_t c = (n % G) * (C / G) + i / (H * W);
      double t = (X[size_t(n * len + i)] - m) / std::sqrt(v + 1e-5) * Wv[size_t(c)] + Bv[size_t(c)];
      r[size_t(n * len + i)] = t;
      rs[size_t(n * len + i)] = silu_d(t);
    }
  }
  EXPECT_TRUE(tensors_close(cpu::group_norm(x, int(G), w, b, 1e-5f, false), ref(r, x.shape()), kTol));
  EXPECT_TRUE(tensors_close(cpu::group_norm(x, int(G), w, b, 1e-5f, true), ref(rs, x.shape()), kTol));
}

TEST(OpsCpu, Elementwise) {
  Tensor a = rnd({3, 7, 5}, 12, -4, 4), b = rnd({3, 7, 5}, 13, -4, 4);
  auto A = vals(a), Bv = vals(b);
  auto map = [&](auto f) {
    std::vector<double> r(A.size());
    for (size_t i = 0; i < A.size(); ++i) r[i] = f(A[i], Bv[i]);
    return ref(r, a.shape());
  };
  EXPECT_TRUE(tensors_close(cpu::silu(a), map([](double p, double) { return silu_d(p); }), kTol));
  EXPECT_TRUE(tensors_close(cpu::gelu(a), map([](double p, double) { return gelu_d(p); }), kTol));
  EXPECT_TRUE(tensors_close(cpu::add(a, b), map([](double p, double q) { return p + q; }), kTol));
  EXPECT_TRUE(tensors_close(cpu::mul(a, b), map([](double p, double q) { return p * q; }), kTol));
  EXPECT_TRUE(tensors_close(cpu::scale(a, 0.37f), map([](double p, double) { return p * double(0.37f); }), kTol));
  EXPECT_TRUE(tensors_close(cpu::swiglu(a, b), map([](double p, double q) { return silu_d(p) * q; }), kTol));
  EXPECT_TRUE(tensors_close(cpu::geglu(a, b), map([](double p, double q) { return gelu_d(p) * q; }), kTol));
}

TEST(OpsCpu, ModulateAndGatedResidual) {
  const int64_t B = 2, S = 3, C = 8;
  Tensor x = rnd({B, S, C}, 14), y = rnd({B, S, C}, 15), sh = rnd({B, C}, 16), sc = rnd({B, C}, 17);
  Tensor sh1 = rnd({1, C}, 18);
  auto X = vals(x), Y = vals(y), SH = vals(sh), SC = vals(sc), SH1 = vals(sh1);
  std::vector<double> m(X.size()), m1(X.size()), g(X.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t c = 0; c < C; ++c) {
        size_t i = size_t((b * S + s) * C + c), v = size_t(b * C + c);
        m[i] = X[i] * (1 + SC[v]) + SH[v];
        m1[i] = X[i] * (1 + SC[v]) + SH1[size_t(c)];
        g[i] = X[i] + SC[v] * Y[i];
      }
  EXPECT_TRUE(tensors_close(cpu::modulate(x, sh, sc), ref(m, x.shape()), kTol));
  EXPECT_TRUE(tensors_close(cpu::modulate(x, sh1, sc), ref(m1, x.shape()), kTol));
  EXPECT_TRUE(tensors_close(cpu::gated_residual(x, sc, y), ref(g, x.shape()), kTol));
}

TEST(OpsCpu, Cast) {
  Tensor x = rnd({4, 9}, 19, -300, 300);
  auto X = x.to_vector();
  Tensor bf = cpu::cast(x, DType::BF16), h = cpu::cast(x, DType::F16);
  ASSERT_EQ(bf.dtype(), DType::BF16);
  auto B = bf.to_vector(), H = h.to_vector();
  for (size_t i = 0; i < X.size(); ++i) {
    EXPECT_EQ(B[i], round_bf16(X[i]));
    EXPECT_NEAR(H[i], X[i], std::fabs(X[i]) * 1e-3);
  }
  EXPECT_TRUE(tensors_close(cpu::cast(bf, DType::F32), bf, 0));
  EXPECT_EQ(cpu::cast(bf, DType::F32).dtype(), DType::F32);
}

TEST(OpsCpu, Rope) {
  const int64_t B = 2, S = 3, H = 2, D = 8;
  Tensor x = rnd({B, S, H, D}, 20), cs = rnd({B, S, D}, 21), sn = rnd({B, S, D}, 22);
  for (bool shared : {false, true}) {
    Tensor c = shared ? cpu::slice(cs, 0, 0, 1) : cs, s = shared ? cpu::slice(sn, 0, 0, 1) : sn;
    auto X = vals(x), Cv = vals(c), Sv = vals(s);
    std::vector<double> r(X.size());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < S; ++t)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < D; ++d) {
            size_t base = size_t(((b * S + t) * H + h) * D), tb = size_t(((shared ? 0 : b) * S + t) * D);
            double rot = d < D / 2 ? -X[base + size_t(d + D / 2)] : X[base + size_t(d - D / 2)];
            r[base + size_t(d)] = X[base + size_t(d)] * Cv[tb + size_t(d)] + rot * Sv[tb + size_t(d)];
          }
    EXPECT_TRUE(tensors_close(cpu::rope(x, c, s), ref(r, x.shape()), kTol)) << shared;
  }
}

std::vector<double> naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                                    const ops::AttentionMask& mask) {
  auto Q = vals(q), K = vals(k), V = vals(v);
  const int64_t B = q.dim(0), Sq = q.dim(1), Hq = q.dim(2), D = q.dim(3), Sk = k.dim(1), Hk = k.dim(2);
  std::vector<double> out(Q.size(), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Sq; ++i) {
        int64_t kh = h / (Hq / Hk);
        std::vector<double> s(size_t(Sk), -INFINITY);
        double mx = -INFINITY;
        for (int64_t j = 0; j < Sk; ++j) {
          bool ok = (mask.kv_len.empty() || j < mask.kv_len[size_t(b)]) && (!mask.causal || j <= mask.q_offset + i);
          if (!ok) continue;
          double d = 0;
          for (int64_t c = 0; c < D; ++c) d += Q[size_t(((b * Sq + i) * Hq + h) * D + c)] * K[size_t(((b * Sk + j) * Hk + kh) * D + c)];
          s[size_t(j)] = d * scale;
          mx = std::max(mx, s[size_t(j)]);
        }
        if (mx == -INFINITY) continue;
        double z = 0;
        for (double& e : s) z += (e = std::exp(e - mx));
        for (int64_t j = 0; j < Sk; ++j)
          for (int64_t c = 0; c < D; ++c)
            out[size_t(((b * Sq + i) * Hq + h) * D + c)] += s[size_t(j)] / z * V[size_t(((b * Sk + j) * Hk + kh) * D + c)];
      }
  return out;
}

TEST(OpsCpu, AttentionVariants) {
  const int64_t B = 2, D = 16;
  Tensor q = rnd({B, 70, 4, D}, 23, -2, 2), k = rnd({B, 75, 2, D}, 24, -2, 2), v = rnd({B, 75, 2, D}, 25);
  std::vector<ops::AttentionMask> masks(5);
  masks[1].causal = true, masks[1].q_offset = 5;
  masks[2].kv_len = {75, 31};
  masks[3].causal = true, masks[3].q_offset = 5, masks[3].kv_len = {40, 75};
  masks[4].kv_len = {0, 10};  // batch 0 sees nothing: zeros
  for (size_t m = 0; m < masks.size(); ++m)
    EXPECT_TRUE(tensors_close(cpu::attention(q, k, v, 0.25f, masks[m]),
                              ref(naive_attention(q, k, v, 0.25f, masks[m]), q.shape()), kTol))
        << "mask " << m;
}

// Packed segments: block-diagonal attention, as each segment alone.
TEST(OpsCpu, AttentionPackedSegments) {
  const int64_t D = 16;
  const std::vector<int64_t> segments = {70, 1, 74};
  Tensor q = rnd({1, 145, 4, D}, 26, -2, 2), k = rnd({1, 145, 2, D}, 27, -2, 2), v = rnd({1, 145, 2, D}, 28);
  std::vector<double> expected;
  int64_t at = 0;
  for (int64_t L : segments) {
    auto rows = [&](const Tensor& t) { return cpu::slice(t, 1, at, L); };
    const std::vector<double> part = naive_attention(rows(q), rows(k), rows(v), 0.25f, {});
    expected.insert(expected.end(), part.begin(), part.end());
    at += L;
  }
  ops::AttentionMask m;
  m.segments = segments;
  EXPECT_TRUE(tensors_close(cpu::attention(q, k, v, 0.25f, m), ref(expected, q.shape()), kTol));
  // Not one row, not covering it, empty, or with another mask: refused.
  auto bad = [&](std::vector<int64_t> seg, bool causal, const char* needle) {
    ops::AttentionMask b;
    b.segments = std::move(seg), b.causal = causal;
    test::expect_error([&] { cpu::attention(q, k, v, 0.25f, b); }, needle);
  };
  bad({70, 74}, false, "cover 144 of 145");
  bad({145, 0}, false, "length 0");
  bad({145}, true, "no other mask");
  Tensor q2 = rnd({2, 10, 4, D}, 29), k2 = rnd({2, 10, 2, D}, 30);
  ops::AttentionMask two;
  two.segments = {10};
  test::expect_error([&] { cpu::attention(q2, k2, k2, 0.25f, two); }, "one batch row");
}

std::vector<double> naive_conv(const Tensor& x, const Tensor& w, const Tensor& b, int stride, int pad) {
  auto X = vals(x), W = vals(w), Bv = vals(b);
  const int64_t B = x.dim(0), I = x.dim(1), H = x.dim(2), Wd = x.dim(3), O = w.dim(0), kh = w.dim(2), kw = w.dim(3);
  const int64_t Ho = (H + 2 * pad - kh) / stride + 1, Wo = (Wd + 2 * pad - kw) / stride + 1;
  std::vector<double> r(static_cast<size_t>(B * O * Ho * Wo));
  for (int64_t n = 0; n < B; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t y = 0; y < Ho; ++y)
        for (int64_t xx = 0; xx < Wo; ++xx) {
          double s = Bv[size_t(o)];
          for (int64_t c = 0; c < I; ++c)
            for (int64_t dy = 0; dy < kh; ++dy)
              for (int64_t dx = 0; dx < kw; ++dx) {
                int64_t iy = y * stride - pad + dy, ix = xx * stride - pad + dx;
                if (iy < 0 || iy >= H || ix < 0 || ix >= Wd) continue;
                s += X[size_t(((n * I + c) * H + iy) * Wd + ix)] * W[size_t(((o * I + c) * kh + dy) * kw + dx)];
              }
          r[size_t(((n * O + o) * Ho + y) * Wo + xx)] = s;
        }
  return r;
}

TEST(OpsCpu, Conv2d) {
  struct Case { Shape x, w; int stride, pad; Shape y; };
  for (const Case& c : {Case{{2, 3, 7, 6}, {4, 3, 3, 3}, 1, 1, {2, 4, 7, 6}}, Case{{1, 5, 9, 8}, {3, 5, 3, 3}, 2, 0, {1, 3, 4, 3}},
                        Case{{1, 2, 4, 4}, {6, 2, 1, 1}, 1, 0, {1, 6, 4, 4}},
                        Case{{1, 64, 128, 128}, {2, 64, 3, 3}, 1, 1, {1, 2, 128, 128}}}) {  // last: several bands
    Tensor x = rnd(c.x, 26), w = rnd(c.w, 27).cast(DType::BF16), b = rnd({c.w[0]}, 28);
    EXPECT_TRUE(tensors_close(cpu::conv2d(x, w, b, c.stride, c.pad), ref(naive_conv(x, w, b, c.stride, c.pad), c.y), kTol))
        << shape_str(c.x);
  }
}

TEST(OpsCpu, PadAndUpsample) {
  Tensor x = rnd({2, 3, 4, 5}, 29);
  auto X = vals(x);
  std::vector<double> p(336, 0.0), u(480);
  for (int64_t pl = 0; pl < 6; ++pl)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t w = 0; w < 5; ++w) p[size_t(pl * 56 + (h + 1) * 8 + (w + 2))] = X[size_t(pl * 20 + h * 5 + w)];
  for (int64_t pl = 0; pl < 6; ++pl)
    for (int64_t h = 0; h < 8; ++h)
      for (int64_t w = 0; w < 10; ++w) u[size_t(pl * 80 + h * 10 + w)] = X[size_t(pl * 20 + h / 2 * 5 + w / 2)];
  EXPECT_TRUE(tensors_close(cpu::pad2d(x, 2, 1, 1, 2), ref(p, {2, 3, 7, 8}), 0));
  EXPECT_TRUE(tensors_close(cpu::upsample_nearest2x(x), ref(u, {2, 3, 8, 10}), 0));
}

TEST(OpsCpu, Permute) {
  Tensor x = rnd({2, 3, 4, 5, 2, 3}, 30);
  auto X = vals(x);
  std::vector<int> dims{3, 0, 5, 1, 4, 2};
  Shape in = x.shape(), os;
  for (int d : dims) os.push_back(in[size_t(d)]);
  std::vector<double> r(X.size());
  std::vector<int64_t> idx(6);
  for (size_t lin = 0; lin < X.size(); ++lin) {  // lin indexes the input
    size_t t = lin;
    for (int d = 5; d >= 0; --d) idx[size_t(d)] = int64_t(t % size_t(in[size_t(d)])), t /= size_t(in[size_t(d)]);
    size_t o = 0;
    for (int d = 0; d < 6; ++d) o = o * size_t(os[size_t(d)]) + size_t(idx[size_t(dims[size_t(d)])]);
    r[o] = X[lin];
  }
  EXPECT_TRUE(tensors_close(cpu::permute(x, dims), ref(r, os), 0));
  Tensor m = rnd({3, 4}, 31);
  Tensor mt = cpu::permute(m, {1, 0});
  EXPECT_EQ(mt.shape(), (Shape{4, 3}));
  EXPECT_EQ(mt.to_vector()[1], m.to_vector()[4]);
  EXPECT_TRUE(tensors_close(cpu::permute(mt, {1, 0}), m, 0));
}

TEST(OpsCpu, ConcatAndSlice) {
  Tensor a = rnd({2, 3, 4}, 32), b = rnd({2, 5, 4}, 33);
  Tensor c = cpu::concat({a, b}, 1);
  ASSERT_EQ(c.shape(), (Shape{2, 8, 4}));
  EXPECT_TRUE(tensors_close(cpu::slice(c, 1, 0, 3), a, 0));
  EXPECT_TRUE(tensors_close(cpu::slice(c, -2, 3, 5), b, 0));
  auto C = c.to_vector(), B = b.to_vector();
  EXPECT_EQ(C[size_t(1 * 32 + 3 * 4 + 2)], B[size_t(1 * 20 + 0 * 4 + 2)]);
  Tensor d = cpu::concat({a, a, a}, 0);
  EXPECT_TRUE(tensors_close(cpu::slice(d, 0, 4, 2), a, 0));
  EXPECT_TRUE(tensors_close(cpu::slice(cpu::concat({a, rnd({2, 3, 1}, 34)}, -1), 2, 0, 4), a, 0));
}

TEST(OpsCpu, EmbeddingFromBf16Table) {
  Tensor t = rnd({10, 6}, 35).cast(DType::BF16);
  Tensor e = cpu::embedding(t, {3, 0, 9, 3});
  ASSERT_EQ(e.shape(), (Shape{4, 6}));
  auto T = t.to_vector(), E = e.to_vector();
  for (int j = 0; j < 6; ++j) {
    EXPECT_EQ(E[size_t(j)], T[size_t(18 + j)]);
    EXPECT_EQ(E[size_t(12 + j)], T[size_t(54 + j)]);
  }
}

TEST(OpsCpu, SetThreadsKeepsResults) {
  Tensor x = rnd({7, 64}, 36), w = rnd({33, 64}, 37);
  Tensor y1 = cpu::linear(x, w, {});
  cpu::set_threads(1);
  Tensor y2 = cpu::linear(x, w, {});
  cpu::set_threads(0);
  EXPECT_TRUE(tensors_close(y2, y1, 1e-6));
  EXPECT_THROW(cpu::set_threads(-1), Error);
}

// Expects `f` to throw an Error whose message contains every fragment.
template <class F>
void expect_error(F f, std::vector<std::string> fragments) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning " << fragments[0];
  } catch (const Error& e) {
    for (const auto& s : fragments) EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what();
  }
}

TEST(OpsCpu, ShapeAndDtypeErrors) {
  Tensor x = rnd({2, 3, 8}, 40);
  expect_error([&] { cpu::linear(x, rnd({5, 7}, 1), {}); }, {"linear", "[2, 3, 8]", "[5, 7]"});
  expect_error([&] { cpu::linear(x, rnd({5, 8}, 1), rnd({4}, 2)); }, {"linear", "bias"});
  expect_error([&] { cpu::linear(x.cast(DType::BF16), rnd({5, 8}, 1), {}); }, {"linear", "BF16", "F32"});
  expect_error([&] { cpu::linear(x, rnd({5, 8}, 1).cast(DType::F32).reshape({40}), {}); }, {"linear", "2-D"});
  expect_error([&] { cpu::add(x, rnd({2, 3, 7}, 1)); }, {"add", "[2, 3, 8]", "[2, 3, 7]"});
  expect_error([&] { cpu::swiglu(x, rnd({3, 2, 8}, 1)); }, {"swiglu"});
  expect_error([&] { cpu::rms_norm(x, rnd({7}, 1), 1e-5f); }, {"rms_norm", "weight"});
  expect_error([&] { cpu::group_norm(rnd({1, 6, 2, 2}, 1), 4, {}, {}, 1e-5f, false); }, {"group_norm", "4 groups"});
  expect_error([&] { cpu::modulate(x, rnd({3, 8}, 1), rnd({2, 8}, 2)); }, {"modulate", "shift", "[3, 8]"});
  expect_error([&] { cpu::gated_residual(x, rnd({2, 8}, 1), rnd({2, 3, 4}, 2)); }, {"gated_residual"});
  Tensor q = rnd({1, 4, 3, 8}, 1), k = rnd({1, 5, 2, 8}, 2);
  expect_error([&] { cpu::attention(q, k, k, 1.f, {}); }, {"attention", "[1, 4, 3, 8]", "[1, 5, 2, 8]"});
  ops::AttentionMask bad;
  bad.kv_len = {9};
  expect_error([&] { cpu::attention(rnd({1, 4, 2, 8}, 1), k, k, 1.f, bad); }, {"attention", "kv_len 9"});
  expect_error([&] { cpu::rope(rnd({1, 4, 2, 8}, 1), rnd({1, 3, 8}, 2), rnd({1, 3, 8}, 3)); }, {"rope", "[1, 3, 8]"});
  expect_error([&] { cpu::conv2d(rnd({1, 3, 5, 5}, 1), rnd({2, 4, 3, 3}, 2), {}, 1, 1); }, {"conv2d", "[2, 4, 3, 3]"});
  expect_error([&] { cpu::permute(x, {0, 0, 1}); }, {"permute"});
  expect_error([&] { cpu::concat({x, rnd({2, 4, 7}, 1)}, 1); }, {"concat", "[2, 4, 7]"});
  expect_error([&] { cpu::slice(x, 1, 2, 2); }, {"slice", "[2, 4)"});
  expect_error([&] { cpu::slice(x, 3, 0, 1); }, {"slice", "dim 3"});
  expect_error([&] { cpu::embedding(rnd({10, 4}, 1), {3, 10}); }, {"embedding", "10"});
  expect_error([&] { cpu::cast(x, DType::I32); }, {"cast", "I32"});
}

}  // namespace
}  // namespace ernie
