#include "pipeline/tiled_group_norm.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "ops/ops.h"

namespace ernie {

namespace {

std::string I(int64_t i) { return std::to_string(i); }

// Sums of x and x² per (batch row, channel) of x [B, C, H, W]: over all of x (`all`) and over rows
// [r0, r1) x columns [c0, c1) (`core`). One GEMM per moment: the image rows [B*C*H, W] times a [2, W]
// mask (ones; ones on the core columns), in fp32, then the rows summed in double on the host.
struct ChannelSums {
  std::vector<double> all_s, all_q, core_s, core_q;
};
ChannelSums channel_sums(const Tensor& x, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const int64_t B = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  std::vector<float> m(size_t(2 * W), 0.f);
  for (int64_t i = 0; i < W; ++i) m[size_t(i)] = 1.f, m[size_t(W + i)] = (i >= c0 && i < c1) ? 1.f : 0.f;
  const Tensor mask = Tensor::from_vector(m, {2, W}).to(x.device());
  const Tensor rows = (x.dtype() == DType::F32 ? x : ops::cast(x, DType::F32)).reshape({B * C * H, W});
  const std::vector<float> s = ops::linear(rows, mask).to_vector();
  const std::vector<float> q = ops::linear(ops::mul(rows, rows), mask).to_vector();
  ChannelSums r{std::vector<double>(size_t(B * C)), std::vector<double>(size_t(B * C)),
                std::vector<double>(size_t(B * C)), std::vector<double>(size_t(B * C))};
  for (int64_t bc = 0; bc < B * C; ++bc)
    for (int64_t y = 0; y < H; ++y) {
      const size_t i = size_t((bc * H + y) * 2);
      r.all_s[size_t(bc)] += s[i];
      r.all_q[size_t(bc)] += q[i];
      if (y >= r0 && y < r1) r.core_s[size_t(bc)] += s[i + 1], r.core_q[size_t(bc)] += q[i + 1];
    }
  return r;
}

// Channel sums folded into per (batch row, group) moments over `n_per_channel` elements per channel.
GroupMoments group_moments(const std::vector<double>& s, const std::vector<double>& q, int64_t B, int64_t C,
                           int groups, double n_per_channel) {
  const int64_t cg = C / groups;
  GroupMoments g{std::vector<double>(size_t(B * groups), n_per_channel * double(cg)),
                 std::vector<double>(size_t(B * groups)), std::vector<double>(size_t(B * groups))};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) {
      const size_t k = size_t(b * groups + c / cg);
      g.sum[k] += s[size_t(b * C + c)];
      g.sumsq[k] += q[size_t(b * C + c)];
    }
  return g;
}

// Mean and std (sqrt(var + eps)) of entry k.
std::pair<double, double> mean_std(const GroupMoments& m, size_t k, float eps) {
  const double mean = m.sum[k] / m.count[k];
  const double var = std::max(0.0, m.sumsq[k] / m.count[k] - mean * mean);
  return {mean, std::sqrt(var + double(eps))};
}

}  // namespace

void TiledGroupNorm::begin_tile(int64_t th, int64_t tw, int64_t cy0, int64_t cy1, int64_t cx0, int64_t cx1) {
  ERNIE_CHECK(th > 0 && tw > 0 && 0 <= cy0 && cy0 < cy1 && cy1 <= th && 0 <= cx0 && cx0 < cx1 && cx1 <= tw,
              "tiled GroupNorm: core [", I(cy0), ", ", I(cy1), ") x [", I(cx0), ", ", I(cx1),
              ") does not lie in a ", I(th), "x", I(tw), " tile");
  th_ = th, tw_ = tw, cy0_ = cy0, cy1_ = cy1, cx0_ = cx0, cx1_ = cx1;
  calls_ = 0;
}

void TiledGroupNorm::end_tile() {
  if (tiles_++ == 0) per_tile_ = calls_;
  ERNIE_CHECK(calls_ == per_tile_, "tiled GroupNorm: a tile made ", I(int64_t(calls_)), " GroupNorm calls, the first ",
              I(int64_t(per_tile_)));
  ERNIE_CHECK(!global_ || calls_ == global_->size(), "tiled GroupNorm: ", I(int64_t(calls_)),
              " calls per tile, but the previous pass recorded ", I(int64_t(global_->size())));
}

Tensor TiledGroupNorm::call(const Tensor& x, int groups, const Flux2Vae::Norm& n, float eps, bool silu) {
  const size_t call = calls_++;
  ERNIE_CHECK(x.ndim() == 4 && x.dim(2) % th_ == 0 && x.dim(3) % tw_ == 0 && x.dim(2) / th_ == x.dim(3) / tw_,
              "tiled GroupNorm: input ", shape_str(x.shape()), " is not the ", I(th_), "x", I(tw_),
              " tile at a multiple of its resolution");
  const int64_t B = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), f = H / th_;
  ERNIE_CHECK(groups > 0 && C % groups == 0, "tiled GroupNorm: ", I(C), " channels in ", I(groups), " groups");
  const bool use_global = global_ && call < global_->size();
  ERNIE_CHECK(!global_ || use_global, "tiled GroupNorm: call ", I(int64_t(call)), " has no whole-image statistics");
  if (!record_ && !use_global) return ops::group_norm(x, groups, n.weight, n.bias, eps, silu);

  const ChannelSums s = channel_sums(x, cy0_ * f, cy1_ * f, cx0_ * f, cx1_ * f);
  if (record_) {
    const GroupMoments core = group_moments(s.core_s, s.core_q, B, C, groups, double((cy1_ - cy0_) * (cx1_ - cx0_) * f * f));
    if (recorded_.size() <= call) recorded_.resize(call + 1);
    GroupMoments& acc = recorded_[call];
    if (acc.count.empty()) {
      acc = core;
    } else {
      ERNIE_CHECK(acc.count.size() == core.count.size(), "tiled GroupNorm: call ", I(int64_t(call)),
                  " changed its batch or groups between tiles");
      for (size_t k = 0; k < acc.count.size(); ++k)
        acc.count[k] += core.count[k], acc.sum[k] += core.sum[k], acc.sumsq[k] += core.sumsq[k];
    }
  }
  if (!use_global) return ops::group_norm(x, groups, n.weight, n.bias, eps, silu);

  const GroupMoments& g = (*global_)[call];
  ERNIE_CHECK(g.count.size() == size_t(B * groups), "tiled GroupNorm: call ", I(int64_t(call)),
              " has statistics for ", I(int64_t(g.count.size())), " (batch row, group) pairs, not ", I(B * groups));
  const GroupMoments own = group_moments(s.all_s, s.all_q, B, C, groups, double(H * W));
  const std::vector<float> w = n.weight.to_vector(), b = n.bias.to_vector();
  ERNIE_CHECK(int64_t(w.size()) == C && int64_t(b.size()) == C, "tiled GroupNorm: affine of ", I(int64_t(w.size())),
              " channels for ", I(C));
  std::vector<Tensor> rows;
  for (int64_t bi = 0; bi < B; ++bi) {
    std::vector<float> w2(static_cast<size_t>(C)), b2(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) {
      const size_t k = size_t(bi * groups + c / (C / groups));
      const auto [mt, st] = mean_std(own, k, eps);
      const auto [mg, sg] = mean_std(g, k, eps);
      w2[size_t(c)] = float(double(w[size_t(c)]) * st / sg);
      b2[size_t(c)] = float(double(b[size_t(c)]) + double(w[size_t(c)]) * (mt - mg) / sg);
    }
    const Tensor xb = B == 1 ? x : ops::slice(x, 0, bi, 1);
    rows.push_back(ops::group_norm(xb, groups, Tensor::from_vector(w2, {C}).to(x.device()),
                                   Tensor::from_vector(b2, {C}).to(x.device()), eps, silu));
  }
  return B == 1 ? rows[0] : ops::concat(rows, 0);
}

}  // namespace ernie
