// Scaled dot-product attention with GQA, causal masking at a query offset (KV-cached decoding),
// per-batch key lengths and packed segments. fp32 scores and softmax; threads over (sequence, head, block of
// queries), a sequence being a batch row or a packed segment.
// A query row that sees no valid key returns zeros.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/cpu_util.h"
#include "ops/shape_rules.h"

namespace ernie::cpu {

namespace {
constexpr int64_t kQueryBlock = 64;
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, const ops::AttentionMask& mask) {
  detail::check_act(q, "attention", "q");
  detail::check_act(k, "attention", "k");
  detail::check_act(v, "attention", "v");
  ops::rules::attention(q, k, v, mask);
  const int64_t B = q.dim(0), Sq = q.dim(1), Hq = q.dim(2), D = q.dim(3);
  const int64_t Sk = k.dim(1), Hkv = k.dim(2);

  Tensor out = Tensor::empty(q.shape(), DType::F32);
  const float *qp = q.f32(), *kp = k.f32(), *vp = v.f32();
  float* op = out.f32();
  // The sequences: per batch row (q rows from b·Sq, keys from b·Sk, kv_len of them valid) or per packed
  // segment (queries and keys the segment's rows).
  struct Seq {
    int64_t q0, k0, n_q, valid;
  };
  std::vector<Seq> seqs;
  if (mask.segments.empty()) {
    for (int64_t b = 0; b < B; ++b) seqs.push_back({b * Sq, b * Sk, Sq, mask.kv_len.empty() ? Sk : mask.kv_len[size_t(b)]});
  } else {
    int64_t at = 0;
    for (int64_t L : mask.segments) seqs.push_back({at, at, L, L}), at += L;
  }
  int64_t longest = 0;
  for (const Seq& sq : seqs) longest = std::max(longest, sq.n_q);
  const int64_t n_seq = int64_t(seqs.size()), group = Hq / Hkv, nblk = (longest + kQueryBlock - 1) / kQueryBlock;
  const int64_t qrow = Hq * D, krow = Hkv * D;

#pragma omp parallel if (detail::worth_threads(B * Hq * Sq * std::max<int64_t>(Sk, 1) * D))
  {
    std::vector<float> p(static_cast<size_t>(Sk));
#pragma omp for collapse(3) schedule(dynamic)
    for (int64_t b = 0; b < n_seq; ++b)
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t blk = 0; blk < nblk; ++blk) {
          const Seq& sq = seqs[size_t(b)];
          const int64_t kh = h / group, valid = sq.valid;
          const float* kb = kp + sq.k0 * krow + kh * D;
          const float* vb = vp + sq.k0 * krow + kh * D;
          for (int64_t i = blk * kQueryBlock; i < std::min(sq.n_q, (blk + 1) * kQueryBlock); ++i) {
            const float* qi = qp + (sq.q0 + i) * qrow + h * D;
            float* oi = op + (sq.q0 + i) * qrow + h * D;
            const int64_t n = mask.causal ? std::min(valid, mask.q_offset + i + 1) : valid;
            std::fill(oi, oi + D, 0.f);
            if (n <= 0) continue;
            float mx = -std::numeric_limits<float>::infinity();
            for (int64_t j = 0; j < n; ++j) {
              const float* kj = kb + j * krow;
              float s = 0.f;
#pragma omp simd reduction(+ : s)
              for (int64_t d = 0; d < D; ++d) s += qi[d] * kj[d];
              p[size_t(j)] = s * scale;
              mx = std::max(mx, p[size_t(j)]);
            }
            float sum = 0.f;
            for (int64_t j = 0; j < n; ++j) sum += (p[size_t(j)] = std::exp(p[size_t(j)] - mx));
            const float inv = 1.f / sum;
            for (int64_t j = 0; j < n; ++j) {
              const float w = p[size_t(j)] * inv;
              const float* vj = vb + j * krow;
              for (int64_t d = 0; d < D; ++d) oi[d] += w * vj[d];
            }
          }
        }
  }
  return out;
}

}  // namespace ernie::cpu
