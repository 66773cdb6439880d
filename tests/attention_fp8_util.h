// Inputs of the fp8 attention tests (CPU and GPU): a fused q|k|v projection with head_dim 128, norm weights
// and rope tables, and the float tensors a Qkv8 stands for.
#pragma once
#include <cmath>
#include <vector>

#include "golden.h"
#include "ops/ops.h"

namespace ernie::test {

struct Fp8AttentionInputs {
  Tensor qkv, norm_q, norm_k, cos, sin;  // qkv [B, S, 3·H·128]; tables [1, S, 128]
  int64_t heads;
};

// Norm weights around 1.5: scores with a standard deviation of ~2.5, softmax rows far from uniform.
inline Fp8AttentionInputs fp8_attention_inputs(int64_t B, int64_t S, int64_t H, uint32_t seed) {
  Fp8AttentionInputs in{rnd({B, S, 3 * H * 128}, seed, 3.f), rnd({128}, seed + 1, 0.5f, 1.5f),
                        rnd({128}, seed + 2, 0.5f, 1.5f), Tensor(), Tensor(), H};
  const Tensor angle = rnd({1, S, 128}, seed + 3, 3.14159f);
  std::vector<float> c(size_t(S * 128)), s(c.size());
  for (size_t i = 0; i < c.size(); ++i) c[i] = std::cos(angle.f32()[i]), s[i] = std::sin(angle.f32()[i]);
  in.cos = Tensor::from_vector(c, {1, S, 128});
  in.sin = Tensor::from_vector(s, {1, S, 128});
  return in;
}

// The float q, k, v [B, S, H, 128] that a (host) Qkv8 encodes: codes times scales, vt back in key order.
inline ops::Qkv fp8_attention_values(const ops::Qkv8& x) {
  const int64_t B = x.q.dim(0), S = x.q.dim(1), H = x.q.dim(2), S32 = x.vt.dim(3), tiles = x.v_scale.dim(2);
  Tensor v = Tensor::empty({B, S, H, 128}, DType::F32);
  const uint8_t* vt = x.vt.data<uint8_t>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t pos = 0; pos < S32; ++pos) {
        const int64_t key = pos / 32 * 32 + ops::fp8_key_order(int(pos % 32));
        if (key >= S) continue;
        const float sc = x.v_scale.f32()[(b * H + h) * tiles + key / ops::kFp8AttentionTile];
        for (int64_t c = 0; c < 128; ++c)
          v.f32()[((b * S + key) * H + h) * 128 + c] = fp8_e4m3_to_f32(vt[((b * H + h) * 128 + c) * S32 + pos]) * sc;
      }
  return {x.q.to_f32(), x.k.to_f32(), v};
}

}  // namespace ernie::test
