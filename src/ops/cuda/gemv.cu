// linear for a few rows (token-by-token decoding): y[m, n] = x[m, :] · w[n, :] (+ b[n]) for M <= 4. One warp
// per output column streams the weight row once in 16-byte packs (four packs per lane in flight before any
// arithmetic, evict-first so the weights do not push the KV cache and activations out of L2) and dots it with
// every x row (fp32 sums). Measured on the H200 (CudaPerf.DISABLED_Decode): eight packs per lane took 84
// registers and ran slower (fewer warps per SM), and so did fewer registers forced by launch bounds (spills).
// The grid is sized to what fits on the GPU at once, each warp taking every W-th column (W warps in all,
// chosen so every warp gets the same number of columns give or take one): no second, mostly idle wave.
// kPair (linear_swiglu): the warp of column n also dots row n + N of a stacked gate|up weight [2N, K] and
// stores silu(gate)·up, each dot rounded to the activation dtype first as a stored projection would be.
// On Hopper, matrices of up to 256 MiB with rows of whole 2 KiB chunks take gemv_bulk_kernel instead (below:
// qkv 14.7 -> 10.6 us, o 10.9 -> 8.6, gate|up 35.8 -> 28.1, down 22.0 -> 15.5 at the PE's shapes), which
// can also normalise its input first (add_rms_norm_linear). Launched as a programmatic dependent where
// pdl_enabled (pdl.cuh).
#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>

#include "ops/cuda/common.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/pdl.cuh"
#include "ops/cuda/wgmma_sm90.cuh"
#include "ops/shape_rules.h"

namespace ernie::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kMaxRows = 4;

// One 16-byte pack of a weight row, read once: streamed past L1 and first out of L2.
template <class T>
__device__ __forceinline__ Pack<T> load_stream(const Pack<T>* p) {
  const uint4 u = __ldcs(reinterpret_cast<const uint4*>(p));
  Pack<T> r;
  std::memcpy(&r, &u, sizeof(r));
  return r;
}

template <class T, int M, bool kPair>
__global__ void __launch_bounds__(32 * kWarps) gemv_kernel(const Pack<T>* __restrict__ x,
                                                           const Pack<T>* __restrict__ w, VecF bias,
                                                           T* __restrict__ y, int64_t n_out, int kp) {
  constexpr int kRows = kPair ? 2 : 1, kUnroll = kPair ? 2 : 4;
  pdl_wait();  // x (and y's memory) belong to earlier kernels
  pdl_launch_dependents();
  const int64_t warps = int64_t(gridDim.x) * kWarps;
  for (int64_t n = blockIdx.x * int64_t(kWarps) + threadIdx.y; n < n_out; n += warps) {
    const Pack<T>* wr[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) wr[r] = w + (n + r * n_out) * kp;
    float acc[kRows][M] = {};
    for (int i0 = threadIdx.x; i0 < kp; i0 += 32 * kUnroll) {
      Pack<T> a[kRows][kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int r = 0; r < kRows; ++r)
          if (i0 + 32 * u < kp) a[r][u] = load_stream(wr[r] + i0 + 32 * u);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = i0 + 32 * u;
        if (i >= kp) break;
#pragma unroll
        for (int m = 0; m < M; ++m) {
          const Pack<T> b = x[m * kp + i];
#pragma unroll
          for (int r = 0; r < kRows; ++r)
#pragma unroll
            for (int e = 0; e < kPack<T>; ++e) acc[r][m] += to_f(a[r][u].v[e]) * to_f(b.v[e]);
        }
      }
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float s[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) s[r] = warp_sum(acc[r][m]);
      if (threadIdx.x != 0) continue;
      if constexpr (kPair) {
        const float gate = to_f(from_f<T>(s[0])), up = to_f(from_f<T>(s[1]));
        y[m * n_out + n] = from_f<T>(silu_f(gate) * up);
      } else {
        y[m * n_out + n] = from_f<T>(s[0] + (bias.defined() ? bias[n] : 0.f));
      }
    }
  }
}

// ---- Hopper: weights through shared memory by bulk copies --------------------------------------------------
// Each warp takes a contiguous run of output columns, so its weight rows are one contiguous byte range (two
// with kPair: the gate rows and the up rows), and streams it in 2 KiB chunks through a ring of kStages
// shared-memory buffers filled by the copy engine (cp.async.bulk, completing on one mbarrier per buffer),
// without holding registers. Lane 0 issues the first kStages chunks before waiting for the previous kernel
// (the weights are no kernel's output). Rows are a whole number of chunks.
// The speed is set by how fast the warps consume chunks, not by the bytes in flight: at the PE's shapes
// (CudaPerf.DISABLED_Decode, one layer's chain) 4 warps x 8 stages took 88-90 us, 8 x 4 83.5, 16 x 2 79.8,
// 12 x 3 76.1; fewer blocks per SM with deeper rings ran far slower (1 block of 4 warps x 16 stages: 148 us).
constexpr int kBulkWarps = 12, kStages = 3, kChunk = 2048;

// The residual add and RMSNorm in front of the projection (add_rms_norm_linear): x becomes
// rms_norm(x + add)·weight, each block normalising its own copy into shared memory; block 0 stores x + add.
template <class T>
struct NormIn {
  const Pack<T>* add;  // null: x alone
  VecF weight;
  float eps;
  Pack<T>* sum;
};

// x [M, kp packs] + add, rounded as a stored sum, into xs; then xs = rms_norm(xs)·weight per row, rounded
// as add_rms_norm stores `normed`. The block's threads.
template <class T, int M>
__device__ void norm_prologue(const Pack<T>* __restrict__ x, const NormIn<T>& in, Pack<T>* xs, int kp) {
  __shared__ float part[M][kBulkWarps];
  const int tid = threadIdx.x;
  float ss[M] = {};
  for (int m = 0; m < M; ++m)
    for (int i = tid; i < kp; i += 32 * kBulkWarps) {
      const Pack<T> a = x[m * kp + i];
      Pack<T> s = a;
      if (in.add) {
        const Pack<T> b = in.add[m * kp + i];
#pragma unroll
        for (int e = 0; e < kPack<T>; ++e) s.v[e] = from_f<T>(to_f(a.v[e]) + to_f(b.v[e]));
      }
#pragma unroll
      for (int e = 0; e < kPack<T>; ++e) ss[m] += to_f(s.v[e]) * to_f(s.v[e]);
      xs[m * kp + i] = s;
      if (blockIdx.x == 0) in.sum[m * kp + i] = s;
    }
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const float t = warp_sum(ss[m]);
    if (tid % 32 == 0) part[m][tid / 32] = t;
  }
  __syncthreads();
  for (int m = 0; m < M; ++m) {
    float total = 0.f;
#pragma unroll
    for (int k = 0; k < kBulkWarps; ++k) total += part[m][k];
    const float inv = rsqrtf(total / float(kp * kPack<T>) + in.eps);
    for (int i = tid; i < kp; i += 32 * kBulkWarps) {
      Pack<T> r = xs[m * kp + i];
#pragma unroll
      for (int e = 0; e < kPack<T>; ++e) {
        const float v = to_f(r.v[e]) * inv;
        r.v[e] = from_f<T>(in.weight.defined() ? v * in.weight[int64_t(i) * kPack<T> + e] : v);
      }
      xs[m * kp + i] = r;
    }
  }
  __syncthreads();
}

template <class T, int M, bool kPair, bool kNorm>
__global__ void __launch_bounds__(32 * kBulkWarps) gemv_bulk_kernel(const Pack<T>* __restrict__ x,
                                                                    const unsigned char* __restrict__ w, VecF bias,
                                                                    T* __restrict__ y, int64_t n_out, int kp,
                                                                    NormIn<T> norm) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kRows = kPair ? 2 : 1, kCp = kChunk / 16;  // packs per chunk
  // [kBulkWarps][kStages][kChunk], then with kNorm the normed x [M][kp packs]
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ uint64_t full[kBulkWarps][kStages];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * kBulkWarps, gw = blockIdx.x * int64_t(kBulkWarps) + warp;
  const int64_t c0 = gw * n_out / warps, c1 = (gw + 1) * n_out / warps;
  const int cpr = kp / kCp;  // chunks per row
  const int64_t chunks = (c1 - c0) * kRows * cpr, row_bytes = int64_t(kp) * 16;
  unsigned char* buf = ring + warp * kStages * kChunk;
  // The chunks go in order (column, row r of kRows, piece of cpr); `next` is the next one to issue (lane 0).
  struct {
    int64_t col;
    int r, piece;
  } next{c0, 0, 0};
  uint64_t policy = 0;
  auto issue = [&](int s) {  // the next chunk into stage s
    wgmma::mbar_expect_tx(&full[warp][s], kChunk);
    wgmma::bulk_load(buf + s * kChunk, w + (next.col + next.r * n_out) * row_bytes + int64_t(next.piece) * kChunk,
                     kChunk, &full[warp][s], policy);
    if (++next.piece < cpr) return;
    next.piece = 0;
    if (++next.r < kRows) return;
    next.r = 0, ++next.col;
  };
  if (lane == 0) {
    policy = wgmma::evict_first_policy();
    for (int s = 0; s < kStages; ++s) wgmma::mbar_init(&full[warp][s], 1);
    for (int s = 0; s < min(chunks, int64_t(kStages)); ++s) issue(s);
  }
  __syncwarp();
  pdl_wait();  // x (and y's memory) belong to earlier kernels
  pdl_launch_dependents();
  const Pack<T>* xv = x;
  if constexpr (kNorm) {
    Pack<T>* xs = reinterpret_cast<Pack<T>*>(ring + kBulkWarps * kStages * kChunk);
    norm_prologue<T, M>(x, norm, xs, kp);
    xv = xs;
  }
  float acc[kRows][M] = {};
  int piece = 0, r = 0, s = 0;
  uint32_t phase = 0;
  int64_t n = c0;
  for (int64_t j = 0; j < chunks; ++j) {
    wgmma::mbar_wait(&full[warp][s], phase);
    const Pack<T>* wp = reinterpret_cast<const Pack<T>*>(buf + s * kChunk);
#pragma unroll
    for (int u = 0; u < kCp / 32; ++u) {
      const Pack<T> a = wp[lane + 32 * u];
      const int i = piece * kCp + lane + 32 * u;
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const Pack<T> b = xv[m * kp + i];
#pragma unroll
        for (int e = 0; e < kPack<T>; ++e) acc[r][m] += to_f(a.v[e]) * to_f(b.v[e]);
      }
    }
    __syncwarp();  // every lane is done with buffer s
    if (lane == 0 && j + kStages < chunks) {
      wgmma::fence_proxy_async();
      issue(s);
    }
    if (++s == kStages) s = 0, phase ^= 1u;
    if (++piece < cpr) continue;
    piece = 0;
    if (++r < kRows) continue;
    r = 0;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float sum[kRows];
#pragma unroll
      for (int q = 0; q < kRows; ++q) sum[q] = warp_sum(acc[q][m]), acc[q][m] = 0.f;
      if (lane != 0) continue;
      if constexpr (kPair)
        y[m * n_out + n] = from_f<T>(silu_f(to_f(from_f<T>(sum[0]))) * to_f(from_f<T>(sum[1])));
      else
        y[m * n_out + n] = from_f<T>(sum[0] + (bias.defined() ? bias[n] : 0.f));
    }
    ++n;
  }
#else
  __trap();  // the dispatcher takes this kernel only where sm_90+ code runs (bulk_ok: sm90_code)
#endif
}

// out[r, i] = silu(gate_up[r, i]) · gate_up[r, I + i]: the activation of the rows the GEMV does not take.
// P elements per access (I % P == 0, rows aligned to P elements).
template <class T, int P>
struct alignas(sizeof(T) * P) Elems {
  T v[P];
};
template <class T, int P>
__global__ void swiglu_halves_kernel(const T* __restrict__ gate_up, T* __restrict__ out, int64_t n, int64_t I) {
  using E = Elems<T, P>;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n; p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = p * P % I;
    const T* row = gate_up + (p * P / I) * 2 * I;
    const E g = *reinterpret_cast<const E*>(row + i), u = *reinterpret_cast<const E*>(row + I + i);
    E r;
#pragma unroll
    for (int e = 0; e < P; ++e) r.v[e] = from_f<T>(silu_f(to_f(g.v[e])) * to_f(u.v[e]));
    reinterpret_cast<E*>(out)[p] = r;
  }
}

// Blocks of `kernel` (`threads` threads, `smem` bytes of dynamic shared memory) resident on the whole of
// `device` at once.
int resident_blocks(const void* kernel, int device, int threads, size_t smem) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, size_t>, int> known;
  std::lock_guard<std::mutex> lk(mu);
  auto [it, fresh] = known.try_emplace({kernel, device, smem}, 0);
  if (fresh) {
    int per_sm = 0;
    cudaFuncAttributes attr{};
    ERNIE_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    if (smem + attr.sharedSizeBytes > 48 * 1024) {  // opt in to all the device allows, so no smaller size set
      int optin = 0;                                 // later can shrink it
      ERNIE_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
      ERNIE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            optin - int(attr.sharedSizeBytes)));
    }
    ERNIE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
    it->second = std::max(1, per_sm * sm_count(device));
  }
  return it->second;
}

// The bulk kernel on this device for an [N, K] weight of `elem`-byte elements: rows of whole chunks, and not
// the largest matrices, which the register kernel streams faster once its pipe is full (the 805 MB LM head:
// 186 against 191-200 us; the per-layer matrices of up to 113 MB are faster in bulk, CudaPerf.DISABLED_Decode).
bool bulk_ok(int device, int64_t N, int64_t K, size_t elem) {
  return sm90_code(device) && K * int64_t(elem) % kChunk == 0 && N * K * int64_t(elem) <= (256 << 20);
}

// N output columns (kPair: of w's 2N rows) for M rows of x; with `norm` (M = 1, bulk_ok) x is first
// normalised as add_rms_norm_linear asks.
template <class T, bool kPair>
void launch(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, int64_t M, int64_t N, int64_t K,
            const NormIn<T>* norm = nullptr) {
  const int device = detail::dev(x);
  const int kp = int(K / kPack<T>);
  auto args = [&](auto kernel) {
    // As many warps as fit at once, then as few as give every warp the same number of columns (±1).
    const int64_t fit = int64_t(resident_blocks(reinterpret_cast<const void*>(kernel), device, 32 * kWarps, 0)) * kWarps;
    const int64_t per_warp = (N + fit - 1) / fit, warps = (N + per_warp - 1) / per_warp;
    const unsigned grid = unsigned((warps + kWarps - 1) / kWarps);
    launch_kernel(pdl_enabled(device), kernel, dim3(grid), dim3(32, kWarps), 0, stream(device), x.data<Pack<T>>(),
                  w.data<Pack<T>>(), vec(b), y.data<T>(), N, kp);
  };
  auto bulk_args = [&](auto kernel, size_t x_bytes) {
    // As many warps as fit at once (at most one per column); each takes an even share of the columns.
    const size_t smem = size_t(kBulkWarps) * kStages * kChunk + x_bytes;
    const int64_t fit = resident_blocks(reinterpret_cast<const void*>(kernel), device, 32 * kBulkWarps, smem);
    const unsigned grid = unsigned(std::min(fit, (N + kBulkWarps - 1) / kBulkWarps));
    launch_kernel(pdl_enabled(device), kernel, dim3(grid), dim3(32 * kBulkWarps), smem, stream(device),
                  x.data<Pack<T>>(), static_cast<const unsigned char*>(w.raw()), vec(b), y.data<T>(), N, kp,
                  norm ? *norm : NormIn<T>{});
  };
  auto run = [&](auto rows) {
    constexpr int kM = decltype(rows)::value;
    if constexpr (kM == 1)
      if (norm) return bulk_args(gemv_bulk_kernel<T, 1, kPair, true>, size_t(kp) * 16);
    if (bulk_ok(device, N * (kPair ? 2 : 1), K, sizeof(T))) bulk_args(gemv_bulk_kernel<T, kM, kPair, false>, 0);
    else args(gemv_kernel<T, kM, kPair>);
  };
  switch (M) {
    case 1: run(std::integral_constant<int, 1>{}); break;
    case 2: run(std::integral_constant<int, 2>{}); break;
    case 3: run(std::integral_constant<int, 3>{}); break;
    default: run(std::integral_constant<int, 4>{}); break;
  }
  ERNIE_CUDA_LAUNCH(kPair ? "linear_swiglu" : "gemv");
}

}  // namespace

bool gemv_supported(const Tensor& x, const Tensor& w, int64_t M) {
  const int pack = x.dtype() == DType::F32 ? 4 : 8;
  return M >= 1 && M <= kMaxRows && x.dtype() == w.dtype() && (x.dtype() == DType::F32 || x.dtype() == DType::BF16) &&
         w.dim(1) % pack == 0 && aligned16(x.raw()) && aligned16(w.raw()) && w.dim(0) <= INT32_MAX * int64_t(kWarps);
}

void gemv(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, int64_t M, int64_t N, int64_t K) {
  if (x.dtype() == DType::F32) launch<float, false>(x, w, b, y, M, N, K);
  else launch<__nv_bfloat16, false>(x, w, b, y, M, N, K);
}

Tensor linear_swiglu(const Tensor& x, const ops::Weight& gate_up) {
  detail::check_act(x, "linear_swiglu", "x");
  detail::check_same_device(x, gate_up.w, "linear_swiglu", "weight");
  const int64_t I = ops::rules::linear_swiglu(x, gate_up.w), K = x.dim(-1), M = K ? x.numel() / K : 0;
  Shape ys = x.shape();
  ys.back() = I;
  if (!gate_up.quantized() && K > 0 && I > 0 && M > 0 && gemv_supported(x, gate_up.w, M)) {
    Tensor y = Tensor::empty(ys, x.dtype(), x.device());
    if (x.dtype() == DType::F32) launch<float, true>(x, gate_up.w, {}, y, M, I, K);
    else launch<__nv_bfloat16, true>(x, gate_up.w, {}, y, M, I, K);
    return y;
  }
  // The projection, then the activation over its halves.
  const Tensor h = gate_up.quantized() ? linear_q(x, gate_up.w, gate_up.scale, {}) : linear(x, gate_up.w, {});
  Tensor y = Tensor::empty(ys, h.dtype(), x.device());
  const int64_t n = y.numel();
  if (n == 0) return y;
  cudaStream_t st = stream(detail::dev(x));
  ERNIE_DISPATCH_ACT(h.dtype(), "linear_swiglu", {
    if (I % kPack<T> == 0 && aligned16(h.raw()))
      swiglu_halves_kernel<T, kPack<T>><<<detail::blocks_for(n / kPack<T>, 256), 256, 0, st>>>(h.data<T>(), y.data<T>(),
                                                                                             n / kPack<T>, I);
    else
      swiglu_halves_kernel<T, 1><<<detail::blocks_for(n, 256), 256, 0, st>>>(h.data<T>(), y.data<T>(), n, I);
  });
  ERNIE_CUDA_LAUNCH("linear_swiglu");
  return y;
}

bool add_rms_norm_linear_supported(const Tensor& x, const Tensor& y, const Tensor& norm_weight, const ops::Weight& w,
                                   bool swiglu) {
  if (!x.defined() || !x.device().is_cuda() || x.ndim() < 1 || !w.defined() || w.quantized() || w.w.ndim() != 2)
    return false;
  const int64_t K = x.dim(-1), N = w.w.dim(0);
  const bool y_ok = !y.defined() || (y.shape() == x.shape() && y.dtype() == x.dtype() && y.device() == x.device() &&
                                     aligned16(y.raw()));
  const bool nw_ok = !norm_weight.defined() || (norm_weight.numel() == K && norm_weight.device() == x.device() &&
                                                 (norm_weight.dtype() == DType::F32 || norm_weight.dtype() == DType::BF16 ||
                                                  norm_weight.dtype() == DType::F16));
  // The normed row sits in shared memory next to the weight ring (72 KiB): rows of up to 96 KiB.
  return K > 0 && x.numel() == K && K * int64_t(dtype_size(x.dtype())) <= 96 * 1024 && y_ok && nw_ok &&
         w.w.dim(1) == K && N > 0 && (!swiglu || N % 2 == 0) &&
         gemv_supported(x, w.w, 1) && bulk_ok(detail::dev(x), N, K, dtype_size(x.dtype()));
}

ops::SumOut add_rms_norm_linear(const Tensor& x, const Tensor& y, const Tensor& norm_weight, float eps,
                                const ops::Weight& w, bool swiglu) {
  ERNIE_CHECK(add_rms_norm_linear_supported(x, y, norm_weight, w, swiglu),
              "add_rms_norm_linear: not the one-kernel case (ask add_rms_norm_linear_supported first)");
  const int64_t K = x.dim(-1), N = swiglu ? w.w.dim(0) / 2 : w.w.dim(0);
  Shape os = x.shape();
  os.back() = N;
  ops::SumOut r{Tensor::empty(x.shape(), x.dtype(), x.device()), Tensor::empty(os, x.dtype(), x.device())};
  auto run = [&](auto element) {
    using T = decltype(element);
    const NormIn<T> in{y.defined() ? y.data<Pack<T>>() : nullptr, vec(norm_weight), eps, r.sum.data<Pack<T>>()};
    if (swiglu) launch<T, true>(x, w.w, {}, r.out, 1, N, K, &in);
    else launch<T, false>(x, w.w, {}, r.out, 1, N, K, &in);
  };
  if (x.dtype() == DType::F32) run(float());
  else run(__nv_bfloat16());
  return r;
}

}  // namespace ernie::cuda
