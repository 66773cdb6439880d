#include "models/tiled_group_norm.h"

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

void TiledGroupNorm::begin_pass(size_t k) {
  ERNIE_CHECK(k == global_.size(), "tiled GroupNorm: pass ", I(int64_t(k)), " needs the moments of every earlier call, ",
              "but ", I(int64_t(global_.size())), " are known");
  k_ = k;
  acc_ = {};
  tiles_ = stopped_ = 0;
}

void TiledGroupNorm::begin_tile(int64_t in_h, int64_t in_w, int64_t y0, int64_t y1, int64_t x0, int64_t x1) {
  ERNIE_CHECK(0 <= y0 && y0 < y1 && y1 <= in_h && 0 <= x0 && x0 < x1 && x1 <= in_w, "tiled GroupNorm: core [", I(y0),
              ", ", I(y1), ") x [", I(x0), ", ", I(x1), ") does not lie in a ", I(in_h), "x", I(in_w), " tile");
  in_h_ = in_h, in_w_ = in_w, y0_ = y0, y1_ = y1, x0_ = x0, x1_ = x1;
  calls_ = 0;
  ++tiles_;
}

bool TiledGroupNorm::end_pass() {
  ERNIE_CHECK(stopped_ == 0 || stopped_ == tiles_, "tiled GroupNorm: ", I(stopped_), " of ", I(tiles_),
              " tiles reached GroupNorm call ", I(int64_t(k_)), ", the others did not");
  if (stopped_ == 0) return false;
  global_.push_back(std::move(acc_));
  return true;
}

Tensor TiledGroupNorm::call(const Tensor& x, int groups, const Flux2Vae::Norm& n, float eps, bool silu,
                            ops::Layout lay) {
  const size_t call = calls_++;
  ERNIE_CHECK(call <= k_, "tiled GroupNorm: call ", I(int64_t(call)), " after the recorded call ", I(int64_t(k_)));
  const bool nhwc = lay == ops::Layout::NHWC;
  ERNIE_CHECK(x.ndim() == 4, "tiled GroupNorm: input ", shape_str(x.shape()), " is not an image");
  const int64_t B = x.dim(0), C = x.dim(nhwc ? 3 : 1), H = x.dim(nhwc ? 1 : 2), W = x.dim(nhwc ? 2 : 3);
  ERNIE_CHECK(H % in_h_ == 0 && W % in_w_ == 0 && H / in_h_ == W / in_w_, "tiled GroupNorm: input ",
              shape_str(x.shape()), " is not the ", I(in_h_), "x", I(in_w_), " tile at a multiple of its resolution");
  const int64_t f = H / in_h_;
  ERNIE_CHECK(groups > 0 && C % groups == 0, "tiled GroupNorm: ", I(C), " channels in ", I(groups), " groups");
  // The moments are gathered on the NCHW form (a copy, in the tiled path only).
  const ChannelSums s = channel_sums(nhwc ? ops::permute(x, {0, 3, 1, 2}) : x, y0_ * f, y1_ * f, x0_ * f, x1_ * f);

  if (call == k_) {  // record the core's moments and stop the step
    const GroupMoments core = group_moments(s.core_s, s.core_q, B, C, groups, double((y1_ - y0_) * (x1_ - x0_) * f * f));
    if (acc_.count.empty()) {
      acc_ = core;
    } else {
      ERNIE_CHECK(acc_.count.size() == core.count.size(), "tiled GroupNorm: call ", I(int64_t(call)),
                  " changed its batch or groups between tiles");
      for (size_t i = 0; i < acc_.count.size(); ++i)
        acc_.count[i] += core.count[i], acc_.sum[i] += core.sum[i], acc_.sumsq[i] += core.sumsq[i];
    }
    ++stopped_;
    throw Stop{};
  }

  const GroupMoments& g = global_[call];
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
                                   Tensor::from_vector(b2, {C}).to(x.device()), eps, silu, lay));
  }
  return B == 1 ? rows[0] : ops::concat(rows, 0);
}

}  // namespace ernie
