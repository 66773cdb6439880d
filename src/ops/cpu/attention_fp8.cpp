// fp8 attention on the CPU (ops.h "fp8 attention"): the reference of the Hopper kernel, step for step — the
// inputs quantized as qkv_norm_rope_fp8 stores them, then per 128-key tile the online softmax in the log2
// domain with its lazy reference, P scaled by the tile's f and rounded to e4m3, O in units of the largest
// tile scale.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/cpu_util.h"
#include "ops/shape_rules.h"

namespace ernie::cpu {

namespace {
constexpr int64_t kD = 128, kTile = ops::kFp8AttentionTile;
constexpr float kLazy = 8.f, kMinTileRatio = 0x1p-20f;  // as attention_wgmma.cu

// e4m3 codes of x [..., 128], unscaled: quantize() with the static scale 1.
Tensor codes(const Tensor& x) {
  static const Tensor one = Tensor::from_vector({1.f}, {1});
  return quantize_static(x.reshape({-1, kD}), DType::F8_E4M3, one).w.reshape(x.shape());
}

std::vector<float> decoded(const Tensor& codes) {
  std::vector<float> f(size_t(codes.numel()));
  convert_to_f32(DType::F8_E4M3, codes.raw(), f.data(), f.size());
  return f;
}
}  // namespace

ops::Qkv8 fp8_attention_inputs(const ops::Qkv& x) {
  ERNIE_CHECK(x.q.ndim() == 4 && x.q.dim(3) == kD && x.k.shape() == x.q.shape() && x.v.shape() == x.q.shape(),
              "qkv_norm_rope_fp8: head_dim must be 128, got q ", shape_str(x.q.shape()));
  const int64_t B = x.q.dim(0), S = x.q.dim(1), H = x.q.dim(2), S32 = (S + 31) / 32 * 32;
  const int64_t tiles = (S + kTile - 1) / kTile;
  ops::Qkv8 r{codes(x.q), codes(x.k), Tensor::zeros({B, H, kD, S32}, DType::F8_E4M3),
              Tensor::empty({B, H, tiles}, DType::F32)};
  const Tensor v = x.v.to_f32();
  const float* vp = v.f32();
  uint8_t* vt = r.vt.data<uint8_t>();
  float* vs = r.v_scale.f32();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < tiles; ++t) {
        auto at = [&](int64_t key, int64_t c) { return vp[((b * S + key) * H + h) * kD + c]; };
        const int64_t k0 = t * kTile, k1 = std::min(S, k0 + kTile);
        float amax = 0.f;
        for (int64_t key = k0; key < k1; ++key)
          for (int64_t c = 0; c < kD; ++c) amax = std::max(amax, std::fabs(at(key, c)));
        const float s = amax > 0.f ? amax / kFp8E4m3Max : std::numeric_limits<float>::min(), inv = 1.f / s;
        vs[(b * H + h) * tiles + t] = s;
        for (int64_t pos = k0; pos < std::min(S32, k0 + kTile); ++pos) {
          const int64_t key = pos / 32 * 32 + ops::fp8_key_order(int(pos % 32));
          if (key >= S) continue;  // zero
          for (int64_t c = 0; c < kD; ++c) vt[((b * H + h) * kD + c) * S32 + pos] = f32_to_fp8_e4m3(at(key, c) * inv);
        }
      }
  return r;
}

Tensor attention_fp8(const ops::Qkv8& x, float scale, const ops::AttentionMask& mask, DType out) {
  ops::rules::attention_fp8(x, mask);
  ERNIE_CHECK(x.q.device().is_cpu(), "attention_fp8: inputs are on ", x.q.device().str(), ", expected cpu");
  const int64_t B = x.q.dim(0), S = x.q.dim(1), H = x.q.dim(2), S32 = x.vt.dim(3), tiles = x.v_scale.dim(2);
  const std::vector<float> q = decoded(x.q), k = decoded(x.k), vt = decoded(x.vt);
  const float* vs = x.v_scale.f32();
  const float sl2 = scale * 1.4426950408889634f;
  Tensor o = Tensor::empty(x.q.shape(), DType::F32);
  float* op = o.f32();
#pragma omp parallel for collapse(3) schedule(dynamic, 16) if (detail::worth_threads(B * H * S * S * kD))
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < S; ++i) {
        const int64_t kv = mask.kv_len.empty() ? S : mask.kv_len[size_t(b)];
        const float* qi = q.data() + ((b * S + i) * H + h) * kD;
        const float* sv = vs + (b * H + h) * tiles;
        float sv_max = 0.f;
        for (int64_t t = 0; t * kTile < kv; ++t) sv_max = std::max(sv_max, sv[t]);
        float acc[kD] = {}, s[kTile], m = -std::numeric_limits<float>::infinity(), l = 0.f;
        for (int64_t t = 0; t * kTile < kv; ++t) {
          const int64_t k0 = t * kTile;
          float mx = -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j < kTile; ++j) {
            s[j] = -std::numeric_limits<float>::infinity();
            if (k0 + j >= kv) continue;
            const float* kj = k.data() + ((b * S + k0 + j) * H + h) * kD;
            float d = 0.f;
            for (int64_t c = 0; c < kD; ++c) d += qi[c] * kj[c];
            mx = std::max(mx, s[j] = d);
          }
          const float m_new = mx * sl2 > m + kLazy ? mx * sl2 : m, corr = std::exp2(m - m_new);
          const float f = std::max(sv[t] / sv_max, kMinTileRatio), c = m_new - std::log2(f);
          float sum = 0.f;
          for (int64_t j = 0; j < kTile; ++j) sum += (s[j] = std::exp2(std::fma(s[j], sl2, -c)));
          l = l * corr + sum * (1.f / f);
          m = m_new;
          for (int64_t c2 = 0; c2 < kD; ++c2) acc[c2] *= corr;
          for (int64_t pos = k0; pos < std::min(S32, k0 + kTile); ++pos) {
            const float p = fp8_e4m3_to_f32(f32_to_fp8_e4m3(s[pos / 32 * 32 + ops::fp8_key_order(int(pos % 32)) - k0]));
            if (p == 0.f) continue;
            const float* vc = vt.data() + (b * H + h) * kD * S32 + pos;
            for (int64_t c2 = 0; c2 < kD; ++c2) acc[c2] += p * vc[c2 * S32];
          }
        }
        float* oi = op + ((b * S + i) * H + h) * kD;
        const float scale_out = l > 0.f ? sv_max / l : 0.f;
        for (int64_t c2 = 0; c2 < kD; ++c2) oi[c2] = acc[c2] * scale_out;
      }
  return out == DType::F32 ? o : cast(o, out);
}

Tensor attention_fp8(const std::vector<ops::Qkv8>& segments, float scale, DType out) {
  std::vector<Tensor> parts;
  for (const ops::Qkv8& x : segments) parts.push_back(cpu::attention_fp8(x, scale, {}, out));
  return concat(parts, 1);
}

}  // namespace ernie::cpu
