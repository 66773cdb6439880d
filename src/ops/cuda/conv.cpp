// conv2d, NCHW or NHWC: cuDNN's convolution (legacy API; the algorithm measured by cudnnFind on the first
// call of a shape and remembered in the tuning cache, or the heuristic's with ERNIE_TUNE=0) when the build
// has cuDNN, else (or when cuDNN has no algorithm for the shape) im2col + GEMM in bands of output pixels.
// ERNIE_CONV=im2col forces the portable path. BF16 runs on tensor cores with fp32 accumulation; F32 runs in
// plain fp32 (no TF32). On Hopper cuDNN's tensor-core kernels are NHWC: NCHW operands are converted
// around every call (cudnn::nchwToNhwcKernel), NHWC ones are used as they are.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>

#ifdef ERNIE_HAVE_CUDNN
#include <cudnn.h>
#endif

#include "ops/cuda/common.h"
#include "ops/cuda/conv_kernels.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/tuning_cache.h"
#include "ops/shape_rules.h"

namespace ernie::cuda {

namespace {

using nlohmann::json;

constexpr int64_t kColumnBytes = int64_t(256) << 20;

// NHWC: each band's GEMM result [np, O] is the band's output pixels already.
Tensor conv_im2col_nhwc(const Tensor& x, const Tensor& w, const Tensor& bias, int stride, int pad, Tensor& y) {
  const int64_t B = x.dim(0), O = w.dim(0), kh = w.dim(1), kw = w.dim(2), Wo = y.dim(2), hw = y.dim(1) * Wo;
  const int64_t K = kh * kw * x.dim(3);
  const Tensor w2 = w.reshape({O, K});
  cudaStream_t st = stream(detail::dev(x));
  const int64_t band = std::max<int64_t>(1, std::min<int64_t>(hw, kColumnBytes / int64_t(dtype_size(x.dtype()) * K)));
  for (int64_t n = 0; n < B; ++n) {
    const Tensor xi = x.narrow(n, 1).reshape({x.dim(1), x.dim(2), x.dim(3)});
    const Tensor yi = y.narrow(n, 1).reshape({hw, O});
    for (int64_t p0 = 0; p0 < hw; p0 += band) {
      const int64_t np = std::min(band, hw - p0);
      Tensor col = Tensor::empty({np, K}, x.dtype(), x.device());
      im2col_nhwc(xi, col, p0, np, int(kh), int(kw), stride, pad, int(Wo), st);
      const Tensor part = linear(col, w2, bias);  // [np, O]
      ERNIE_CUDA_CHECK(cudaMemcpyAsync(yi.narrow(p0, np).raw(), part.raw(), part.nbytes(), cudaMemcpyDeviceToDevice, st));
    }
  }
  return y;
}

Tensor conv_im2col(const Tensor& x, const Tensor& w, const Tensor& bias, int stride, int pad, Tensor& y,
                   ops::Layout layout) {
  if (layout == ops::Layout::NHWC) return conv_im2col_nhwc(x, w, bias, stride, pad, y);
  const int64_t B = x.dim(0), I = x.dim(1), O = w.dim(0), kh = w.dim(2), kw = w.dim(3);
  const int64_t Ho = y.dim(2), Wo = y.dim(3), hw = Ho * Wo, K = I * kh * kw;
  const Tensor w2 = w.reshape({O, K});
  cudaStream_t st = stream(detail::dev(x));
  const int64_t band = std::max<int64_t>(1, std::min<int64_t>(hw, kColumnBytes / int64_t(dtype_size(x.dtype()) * K)));
  for (int64_t n = 0; n < B; ++n) {
    const Tensor xi = x.narrow(n, 1).reshape({I, x.dim(2), x.dim(3)});
    Tensor yi = y.narrow(n, 1).reshape({O, hw});
    for (int64_t p0 = 0; p0 < hw; p0 += band) {
      const int64_t np = std::min(band, hw - p0);
      Tensor col = Tensor::empty({np, K}, x.dtype(), x.device());
      im2col(xi, col, p0, np, int(kh), int(kw), stride, pad, int(Wo), st);
      Tensor part = linear(col, w2, bias);  // [np, O]
      scatter_nchw(part, yi, p0, hw, st);
    }
  }
  return y;
}

#ifdef ERNIE_HAVE_CUDNN
#define ERNIE_CUDNN_CHECK(call)                                                           \
  do {                                                                                    \
    cudnnStatus_t s_ = (call);                                                            \
    if (s_ != CUDNN_STATUS_SUCCESS) ::ernie::fail("cuDNN error in ", #call, ": ", cudnnGetErrorString(s_)); \
  } while (0)

constexpr size_t kMaxWorkspace = size_t(1) << 30;

// (device, element type, B, I, H, W, O, kh, kw, stride, pad, NHWC)
using Key = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, bool>;

struct Plan {
  cudnnTensorDescriptor_t xd = nullptr, yd = nullptr;
  cudnnFilterDescriptor_t wd = nullptr;
  cudnnConvolutionDescriptor_t cd = nullptr;
  cudnnConvolutionFwdAlgo_t algo{};
  size_t workspace = 0;
  // The bias in the convolution's epilogue (cudnnConvolutionBiasActivationForward with the identity, which
  // cuDNN runs for IMPLICIT_PRECOMP_GEMM only): bias [1, O, 1, 1] and the activation; null otherwise.
  cudnnTensorDescriptor_t bd = nullptr;
  cudnnActivationDescriptor_t act = nullptr;
};

// ERNIE_CONV_BIAS=kernel: the bias in a pass of its own after every cuDNN convolution (for comparison).
bool bias_in_epilogue() {
  static const bool on = [] {
    const char* e = std::getenv("ERNIE_CONV_BIAS");
    return !(e && std::strcmp(e, "kernel") == 0);
  }();
  return on;
}

cudnnHandle_t cudnn_handle(int device) {
  static std::mutex mu;
  static std::map<int, cudnnHandle_t> handles;
  std::lock_guard<std::mutex> lk(mu);
  cudnnHandle_t& h = handles[device];
  if (!h) {
    ERNIE_CUDNN_CHECK(cudnnCreate(&h));
    ERNIE_CUDNN_CHECK(cudnnSetStream(h, stream(device)));
  }
  return h;
}

// The operands of the call a plan is made for: cudnnFind times the algorithms on them.
struct Operands {
  const void* x;
  const void* w;
  void* y;
  Device device;
};

// The plan of a shape, made on its first call; nullptr (remembered too) when cuDNN has no algorithm for it.
const Plan* plan_for(const Key& key, cudnnHandle_t h, const Operands& ops) {
  static std::mutex mu;
  static std::map<Key, std::optional<Plan>> plans;
  std::lock_guard<std::mutex> lk(mu);
  auto it = plans.find(key);
  if (it != plans.end()) return it->second ? &*it->second : nullptr;
  const auto [device, dt, B, I, H, W, O, kh, kw, stride, pad, nhwc] = key;
  const cudnnDataType_t type = dt == kF32 ? CUDNN_DATA_FLOAT : CUDNN_DATA_BFLOAT16;
  // NHWC: x and y channels-last, the filter [O, kh, kw, I] (cuDNN's KRSC); sizes are given as (n, c, h, w).
  const cudnnTensorFormat_t format = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  Plan p;
  ERNIE_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.xd));
  ERNIE_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.yd));
  ERNIE_CUDNN_CHECK(cudnnCreateFilterDescriptor(&p.wd));
  ERNIE_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p.cd));
  ERNIE_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.xd, format, type, int(B), int(I), int(H), int(W)));
  ERNIE_CUDNN_CHECK(cudnnSetFilter4dDescriptor(p.wd, type, format, int(O), int(I), int(kh), int(kw)));
  ERNIE_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p.cd, pad, pad, stride, stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                                    CUDNN_DATA_FLOAT));
  ERNIE_CUDNN_CHECK(cudnnSetConvolutionMathType(p.cd, dt == kF32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
  int n = 0, c = 0, oh = 0, ow = 0;
  ERNIE_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p.cd, p.xd, p.wd, &n, &c, &oh, &ow));
  ERNIE_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.yd, format, type, n, c, oh, ow));
  // Usable: F32 only without tensor-core math (so F32 stays plain fp32), within the workspace limit.
  auto try_algo = [&](cudnnConvolutionFwdAlgo_t algo, cudnnMathType_t math, size_t limit) {
    if (dt == kF32 && math != CUDNN_FMA_MATH && math != CUDNN_DEFAULT_MATH) return false;
    if (cudnnSetConvolutionMathType(p.cd, math) != CUDNN_STATUS_SUCCESS) return false;
    size_t ws = 0;
    if (cudnnGetConvolutionForwardWorkspaceSize(h, p.xd, p.wd, p.cd, p.yd, algo, &ws) != CUDNN_STATUS_SUCCESS ||
        ws > limit)
      return false;
    p.algo = algo;
    p.workspace = ws;
    return true;
  };
  tuning::Cache& cache = tuning::Cache::of(tuning_identity(int(device)));
  // Workspace: at most 1 GiB, and at most half of what is free (under a --max-vram cap that can be little).
  const size_t ws_limit = std::min(kMaxWorkspace, available_bytes(int(device)) / 2) & ~size_t(255);
  std::string ks = nhwc ? "conv_nhwc" : "conv";
  for (int64_t v : {int64_t(dt), B, I, H, W, O, kh, kw, int64_t(stride), int64_t(pad)})
    ks.append(" ").append(std::to_string(v));
  bool ok = false;
  if (tuning::enabled()) {
    if (auto e = cache.find(ks); e && e->is_object() && e->value("algo", json()).is_number_integer() &&
                                 e->value("math", json()).is_number_integer())
      ok = try_algo(cudnnConvolutionFwdAlgo_t((*e)["algo"].get<int>()), cudnnMathType_t((*e)["math"].get<int>()),
                    ws_limit);
    if (!ok && ops.x && ws_limit > 0) {  // measure every algorithm on the call's operands
      Tensor ws = Tensor::empty({int64_t(ws_limit)}, DType::U8, ops.device);
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      int found = 0;
      if (cudnnFindConvolutionForwardAlgorithmEx(h, p.xd, ops.x, p.wd, ops.w, p.cd, p.yd, ops.y,
                                                 CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf, ws.raw(),
                                                 ws_limit) != CUDNN_STATUS_SUCCESS)
        found = 0;
      for (int i = 0; i < found && !ok; ++i)  // sorted by time
        if (perf[i].status == CUDNN_STATUS_SUCCESS && try_algo(perf[i].algo, perf[i].mathType, ws_limit)) {
          // A choice squeezed by little free memory is not remembered for runs that have more.
          if (ws_limit == kMaxWorkspace)
            cache.store(ks, {{"algo", int(perf[i].algo)}, {"math", int(perf[i].mathType)}, {"ms", perf[i].time}});
          ok = true;
        }
    }
  }
  if (!ok) {  // the heuristic's order
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int found = 0;
    if (cudnnGetConvolutionForwardAlgorithm_v7(h, p.xd, p.wd, p.cd, p.yd, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found,
                                               perf) != CUDNN_STATUS_SUCCESS)
      found = 0;
    for (int i = 0; i < found && !ok; ++i)
      ok = perf[i].status == CUDNN_STATUS_SUCCESS && try_algo(perf[i].algo, perf[i].mathType, ws_limit);
  }
  if (ok && p.algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM && bias_in_epilogue()) {
    ERNIE_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.bd));
    ERNIE_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.bd, format, type, 1, int(O), 1, 1));
    ERNIE_CUDNN_CHECK(cudnnCreateActivationDescriptor(&p.act));
    ERNIE_CUDNN_CHECK(cudnnSetActivationDescriptor(p.act, CUDNN_ACTIVATION_IDENTITY, CUDNN_NOT_PROPAGATE_NAN, 0.0));
  }
  if (!ok) {  // the portable path takes the shape
    cudnnDestroyTensorDescriptor(p.xd);
    cudnnDestroyTensorDescriptor(p.yd);
    cudnnDestroyFilterDescriptor(p.wd);
    cudnnDestroyConvolutionDescriptor(p.cd);
    plans.emplace(key, std::nullopt);
    return nullptr;
  }
  return &*plans.emplace(key, p).first->second;
}

// y = conv(x, w) + bias through cuDNN; false (nothing done) when cuDNN has no algorithm for the shape.
bool conv_cudnn(const Tensor& x, const Tensor& w, const Tensor& bias, int stride, int pad, Tensor& y,
                ops::Layout layout) {
  const int device = detail::dev(x);
  cudnnHandle_t h = cudnn_handle(device);
  const bool nhwc = layout == ops::Layout::NHWC;
  // Sizes as (B, I, H, W) and (O, kh, kw) whatever the layout.
  const Key key{device, x.dtype() == DType::F32 ? kF32 : kBF16, x.dim(0), x.dim(nhwc ? 3 : 1), x.dim(nhwc ? 1 : 2),
                x.dim(nhwc ? 2 : 3), w.dim(0), w.dim(nhwc ? 1 : 2), w.dim(nhwc ? 2 : 3), stride, pad, nhwc};
  const Plan* pp = plan_for(key, h, Operands{x.raw(), w.raw(), y.raw(), x.device()});
  if (!pp) return false;
  const Plan& p = *pp;
  Tensor ws;
  if (p.workspace) ws = Tensor::empty({int64_t(p.workspace)}, DType::U8, x.device());
  const float alpha = 1.f, beta = 0.f;
  void* wsp = p.workspace ? ws.raw() : nullptr;
  if (bias.defined() && p.bd && bias.dtype() == x.dtype()) {
    // y = conv(x) + 0 · z + bias, z = y (not read with a zero scale); a shape cuDNN turns down at run time
    // takes the separate pass below.
    if (cudnnConvolutionBiasActivationForward(h, &alpha, p.xd, x.raw(), p.wd, w.raw(), p.cd, p.algo, wsp, p.workspace,
                                              &beta, p.yd, y.raw(), p.bd, bias.raw(), p.act, p.yd,
                                              y.raw()) == CUDNN_STATUS_SUCCESS)
      return true;
  }
  ERNIE_CUDNN_CHECK(cudnnConvolutionForward(h, &alpha, p.xd, x.raw(), p.wd, w.raw(), p.cd, p.algo, wsp, p.workspace,
                                            &beta, p.yd, y.raw()));
  if (bias.defined()) nhwc ? add_channel_bias_nhwc(y, bias, stream(device)) : add_channel_bias(y, bias, stream(device));
  return true;
}
#endif

// Input + output bytes above which a batch of one is computed in output-channel groups (see conv2d);
// ERNIE_CONV_GROUP_BYTES overrides it (tests).
size_t group_limit() {
  const char* e = std::getenv("ERNIE_CONV_GROUP_BYTES");
  return e ? size_t(std::strtoull(e, nullptr, 10)) : size_t(640) << 20;
}

bool force_im2col() {
  const char* e = std::getenv("ERNIE_CONV");
  return e && std::strcmp(e, "im2col") == 0;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, int stride, int pad, ops::Layout layout) {
  detail::check_act(x, "conv2d", "x");
  detail::check_same_device(x, w, "conv2d", "weight");
  detail::check_float(w, "conv2d", "weight");
  const Shape out = ops::rules::conv2d(x, w, stride, pad, layout);
  const bool nhwc = layout == ops::Layout::NHWC;
  const int64_t B = x.dim(0), O = w.dim(0), cdim = nhwc ? 3 : 1;
  if (bias.defined()) {
    detail::check_same_device(x, bias, "conv2d", "bias");
    detail::check_float(bias, "conv2d", "bias");
    ERNIE_CHECK(bias.numel() == O, "conv2d: bias ", shape_str(bias.shape()), " should have ", std::to_string(O),
                " elements");
  }
  Tensor y = Tensor::empty(out, x.dtype(), x.device());
  if (y.numel() == 0) return y;
  const Tensor wc = w.dtype() == x.dtype() ? w : cast(w, x.dtype());
#ifdef ERNIE_HAVE_CUDNN
  // cuDNN has no tensor-core kernel for a handful of output channels (the VAE's conv_out has 3; its best
  // fp32 fallback takes ~10 ms at 1024²): zero filters pad O to 8, and the first O channels are kept.
  if (!force_im2col() && x.dtype() == DType::BF16 && O < 8) {
    Shape zs = wc.shape();
    zs[0] = 8 - O;
    const Tensor wp = concat({wc, Tensor::zeros(zs, wc.dtype(), wc.device())}, 0);
    Tensor bp;
    if (bias.defined()) {
      const Tensor bc = cast(bias.reshape({O}), x.dtype());
      bp = concat({bc, Tensor::zeros({8 - O}, bc.dtype(), bc.device())}, 0);
    }
    return slice(cuda::conv2d(x, wp, bp, stride, pad, layout), int(cdim), 0, O);
  }
  if (!force_im2col()) {
    // NCHW: cuDNN's tensor-core kernels stage NHWC copies of input and output in the workspace; when those
    // pass the 1 GiB limit (256 channels at 1024² in the VAE) only a slow fp32 kernel remains (41 ms). A
    // batch of one computes its output channels in groups then, each group a contiguous block of y. NHWC
    // needs no staging copies.
    int64_t groups = 1;
    while (!nhwc && B == 1 && x.nbytes() + y.nbytes() / size_t(groups) > group_limit() && O % (2 * groups) == 0 &&
           groups < 8)
      groups *= 2;
    if (groups == 1) {
      if (conv_cudnn(x, wc, bias, stride, pad, y, layout)) return y;
    } else {
      const int64_t og = O / groups, Ho = out[2], Wo = out[3];
      const Tensor yflat = y.reshape({O, Ho * Wo}), bflat = bias.defined() ? bias.reshape({O}) : Tensor();
      bool ok = true;
      for (int64_t g = 0; g < groups && ok; ++g) {
        Tensor yg = yflat.narrow(g * og, og).reshape({1, og, Ho, Wo});
        ok = conv_cudnn(x, wc.narrow(g * og, og), bias.defined() ? bflat.narrow(g * og, og) : Tensor(), stride, pad,
                        yg, layout);
      }
      if (ok) return y;
    }
  }
#endif
  return conv_im2col(x, wc, bias, stride, pad, y, layout);
}

}  // namespace ernie::cuda
