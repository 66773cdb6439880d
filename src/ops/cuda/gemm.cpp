// linear: y[M, N] = x[M, K] · w[N, K]ᵀ (+ bias[N]) through cuBLASLt. BF16 in/out with fp32 accumulation
// and a bias epilogue; F32 mode computes in plain fp32 (TF32 off) to match the CPU closely. 8-bit weights
// (linear_q): fp8 weights with BF16 activations run as an fp8 GEMM (activations quantized per token first,
// or handed over already quantized: linear_fp8) with the weight's and the tokens' scales applied by cuBLASLt
// as outer-vector scales (or, where this cuBLASLt lacks them, by one more pass over y); otherwise (int8, F32
// activations, other GPUs) the 8-bit operands are expanded with their scales to the activation dtype for a
// float GEMM: the CPU's values (ops/cpu/gemm.cpp) up to that rounding. Row-major y is column-major
// yᵀ = w · xᵀ, so A = w (transposed), B = x. Descriptors, layouts and the algorithm are cached per shape; the
// algorithm is the fastest of the heuristic's first candidates, timed on the first call's operands and
// remembered across processes in the tuning cache (io/tuning_cache.h).
#include <cublasLt.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "ops/cuda/common.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/quantize.h"
#include "ops/shape_rules.h"
#include "ops/tuning_cache.h"

namespace ernie::cuda {

namespace {

#define ERNIE_CUBLAS_CHECK(call)                                                                          \
  do {                                                                                                    \
    cublasStatus_t s_ = (call);                                                                           \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                                      \
      ::ernie::fail("cuBLASLt error in ", #call, ": ", cublasLtGetStatusName(s_), " (", cublasLtGetStatusString(s_), ")"); \
  } while (0)

constexpr size_t kWorkspace = size_t(32) << 20;
// The Key's operand type for e4m3 operands (next to kF32, kBF16); kFp8Fast: with fast accumulation (the
// tensor cores' own accumulator, no periodic promotion to fp32), the default: on the H200 5.7 % faster per
// DiT step, and the full-size fp8 error unchanged (cosine 0.98921 vs 0.98930 against bf16, far below the
// e4m3 rounding itself). ERNIE_FP8_FAST_ACCUM=0 turns it off.
constexpr int kFp8 = 3, kFp8Fast = 4;
bool is_fp8(int dt) { return dt == kFp8 || dt == kFp8Fast; }
int fp8_type() {
  static const bool fast = [] {
    const char* e = std::getenv("ERNIE_FP8_FAST_ACCUM");
    return !(e && std::string(e) == "0");
  }();
  return fast ? kFp8Fast : kFp8;
}

struct Handle {
  cublasLtHandle_t lt = nullptr;
  Tensor workspace;
};

Handle& handle(int device) {
  static std::mutex mu;
  static std::map<int, Handle> handles;
  std::lock_guard<std::mutex> lk(mu);
  Handle& h = handles[device];
  if (!h.lt) {
    ERNIE_CUBLAS_CHECK(cublasLtCreate(&h.lt));
    h.workspace = Tensor::empty({int64_t(kWorkspace)}, DType::U8, Device{DeviceKind::CUDA, device});
  }
  return h;
}

int alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  for (int al : {256, 128, 64, 32, 16, 8, 4})
    if (a % al == 0) return al;
  return 2;
}

// device, M, N, K, operand type, bias, alignments of w, x, y (and C), bias, out type, epilogue (kPlain or
// kResidual: y = C + x·wᵀ, beta 1).
using Key = std::tuple<int, int64_t, int64_t, int64_t, int, bool, int, int, int, int, int, int>;
constexpr int kPlain = 0, kResidual = 1;

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool post_scale = false;  // fp8 without outer-vector scales: y is scaled (and biased) after the GEMM
  bool supported = true;    // false: cuBLASLt has no algorithm for this epilogue (the caller composes)
};

// The operands of the call a plan is made for: candidates are timed on them. fp8: sw = the weight's row
// scales (N), sx = the tokens' scales (M). kResidual: c = the residual added to the product.
struct Operands {
  const void *w, *x, *bias, *sw, *sx;
  void* y;
  void* workspace;
  cudaStream_t stream;
  const void* c = nullptr;
};

cublasStatus_t run(cublasLtHandle_t lt, const Plan& p, const cublasLtMatmulAlgo_t& algo, const Operands& o) {
  const float alpha = 1.f, beta = o.c ? 1.f : 0.f;
  return cublasLtMatmul(lt, p.op, &alpha, o.w, p.a, o.x, p.b, &beta, o.c ? o.c : o.y, p.c, o.y, p.c, &algo,
                        o.workspace, kWorkspace, o.stream);
}

// Mean seconds of 3 runs after a warm-up; infinity when the algorithm fails on these operands.
float time_algo(cublasLtHandle_t lt, const Plan& p, const cublasLtMatmulAlgo_t& algo, const Operands& o) {
  if (run(lt, p, algo, o) != CUBLAS_STATUS_SUCCESS) return INFINITY;
  cudaEvent_t t0, t1;
  ERNIE_CUDA_CHECK(cudaEventCreate(&t0));
  ERNIE_CUDA_CHECK(cudaEventCreate(&t1));
  ERNIE_CUDA_CHECK(cudaEventRecord(t0, o.stream));
  bool ok = true;
  for (int i = 0; i < 3 && ok; ++i) ok = run(lt, p, algo, o) == CUBLAS_STATUS_SUCCESS;
  ERNIE_CUDA_CHECK(cudaEventRecord(t1, o.stream));
  ERNIE_CUDA_CHECK(cudaEventSynchronize(t1));
  float ms = 0.f;
  ERNIE_CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  return ok ? ms / 3e3f : INFINITY;
}

std::string key_string(const Key& k) {
  const auto [device, M, N, K, dt, has_bias, al_a, al_b, al_c, al_bias, out_dt, epilogue] = k;
  (void)device;
  std::string s = "gemm";
  for (int64_t v : {M, N, K, int64_t(dt), int64_t(has_bias), int64_t(al_a), int64_t(al_b), int64_t(al_c),
                    int64_t(al_bias), int64_t(out_dt)})
    s += " " + std::to_string(v);
  return epilogue == kResidual ? s + " residual" : s;
}

const Plan& plan_for(const Key& key, cublasLtHandle_t lt, const Operands& ops) {
  static std::mutex mu;
  static std::map<Key, Plan> plans;
  std::lock_guard<std::mutex> lk(mu);
  auto it = plans.find(key);
  if (it != plans.end()) return it->second;
  const auto [device, M, N, K, dt, has_bias, al_a, al_b, al_c, al_bias, out_dt, epilogue] = key;
  const bool fp8 = is_fp8(dt);
  const cudaDataType_t type = fp8 ? CUDA_R_8F_E4M3 : dt == kF32 ? CUDA_R_32F : CUDA_R_16BF;
  const cudaDataType_t out_type = out_dt == kF32 ? CUDA_R_32F : CUDA_R_16BF;
  Plan p;
  auto describe = [&](bool post_scale) {
    if (p.op) cublasLtMatmulDescDestroy(p.op);
    p.post_scale = post_scale;
    ERNIE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    ERNIE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    ERNIE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (has_bias && !post_scale) {
      const cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
      ERNIE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
      ERNIE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &out_type, sizeof out_type));
      ERNIE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ops.bias, sizeof ops.bias));
    }
    if (dt == kFp8Fast) {
      const int8_t on = 1;
      ERNIE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &on, sizeof on));
    }
    if (fp8 && !post_scale) {
      const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      ERNIE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode));
      ERNIE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode));
      ERNIE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ops.sw, sizeof ops.sw));
      ERNIE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &ops.sx, sizeof ops.sx));
    }
  };
  // ERNIE_FP8_POST_SCALE=1 (tests): the fallback even where cuBLASLt has outer-vector scales; read per plan.
  const char* force_post = std::getenv("ERNIE_FP8_POST_SCALE");
  describe(fp8 && force_post && std::string(force_post) == "1");
  ERNIE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, type, uint64_t(K), uint64_t(N), K));  // w: K x N, ld K
  ERNIE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, type, uint64_t(K), uint64_t(M), K));  // x: K x M, ld K
  ERNIE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, out_type, uint64_t(N), uint64_t(M), N));  // y: N x M, ld N

  // A remembered choice, if cuBLASLt still accepts it for this problem.
  tuning::Cache& cache = tuning::Cache::of(tuning_identity(device));
  const std::string ks = key_string(key);
  if (tuning::enabled())
    if (auto e = cache.find(ks); e && e->is_object() && e->contains("algo") && (*e)["algo"].is_array() &&
                                 (*e)["algo"].size() == 8 &&
                                 std::all_of((*e)["algo"].begin(), (*e)["algo"].end(),
                                             [](const nlohmann::json& v) { return v.is_number_unsigned(); })) {
      cublasLtMatmulAlgo_t algo{};
      for (size_t i = 0; i < 8; ++i) algo.data[i] = (*e)["algo"][i].get<uint64_t>();
      cublasLtMatmulHeuristicResult_t check{};
      if (cublasLtMatmulAlgoCheck(lt, p.op, p.a, p.b, p.c, p.c, &algo, &check) == CUBLAS_STATUS_SUCCESS &&
          check.workspaceSize <= kWorkspace) {
        p.algo = algo;
        return plans.emplace(key, p).first->second;
      }
    }

  cublasLtMatmulPreference_t pref;
  ERNIE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspace;
  ERNIE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  const uint32_t aa = uint32_t(al_a), ab = uint32_t(al_b), ac = uint32_t(al_c);
  ERNIE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof aa));
  ERNIE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof ab));
  ERNIE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof ac));
  ERNIE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ac, sizeof ac));
  constexpr int kCandidates = 8;
  cublasLtMatmulHeuristicResult_t res[kCandidates]{};
  int found = 0;
  auto heuristic = [&] {
    return cublasLtMatmulAlgoGetHeuristic(lt, p.op, p.a, p.b, p.c, p.c, pref, tuning::enabled() ? kCandidates : 1,
                                          res, &found);
  };
  cublasStatus_t hs = heuristic();
  if (epilogue == kResidual && (hs != CUBLAS_STATUS_SUCCESS || found == 0)) {  // the caller composes instead
    cublasLtMatmulPreferenceDestroy(pref);
    p.supported = false;
    return plans.emplace(key, p).first->second;
  }
  if (fp8 && !p.post_scale && (hs != CUBLAS_STATUS_SUCCESS || found == 0)) {  // no outer-vector scales: scale after
    describe(true);
    hs = heuristic();
  }
  cublasLtMatmulPreferenceDestroy(pref);
  if (hs != CUBLAS_STATUS_SUCCESS || found == 0)
    fail("linear: cuBLASLt found no algorithm for M=", std::to_string(M), " N=", std::to_string(N), " K=",
         std::to_string(K), " ", fp8 ? "FP8" : dt == kF32 ? "F32" : "BF16", " (alignments ", std::to_string(al_a), "/",
         std::to_string(al_b), "/", std::to_string(al_c), "/", std::to_string(al_bias), ")");
  int best = 0;
  float best_s = INFINITY;
  if (found > 1)
    for (int i = 0; i < found; ++i)
      if (const float t = time_algo(lt, p, res[i].algo, ops); t < best_s) best = i, best_s = t;
  p.algo = res[best].algo;
  if (tuning::enabled()) {
    nlohmann::json algo = nlohmann::json::array();
    for (uint64_t v : p.algo.data) algo.push_back(v);
    cache.store(ks, {{"algo", algo}, {"candidates", found}, {"us", std::isfinite(best_s) ? best_s * 1e6 : -1.0},
                     {"post_scale", p.post_scale}});
  }
  return plans.emplace(key, p).first->second;
}

// The bias of the linears: checked against N outputs and x's device, in the output dtype `out` (undefined
// stays undefined).
Tensor checked_bias(const Tensor& x, const Tensor& bias, int64_t N, DType out) {
  if (!bias.defined()) return bias;
  detail::check_same_device(x, bias, "linear", "bias");
  detail::check_float(bias, "linear", "bias");
  ERNIE_CHECK(bias.numel() == N, "linear: bias ", shape_str(bias.shape()), " should have ", std::to_string(N),
              " elements");
  return bias.dtype() == out ? bias : cast(bias, out);
}

// The rows of x [..., K] (also when K = 0).
int64_t leading_rows(const Tensor& x) {
  int64_t m = 1;
  for (int i = 0; i + 1 < x.ndim(); ++i) m *= x.dim(i);
  return m;
}

// y [..., N] for a product with nothing to sum (K = 0): the bias in every row, or zeros.
Tensor bias_rows(const Shape& ys, DType out, Device device, const Tensor& b, int64_t M, int64_t N) {
  Tensor zeros = Tensor::zeros(ys, out, device);
  if (!b.defined() || M == 0 || N == 0) return zeros;
  return add(zeros, concat(std::vector<Tensor>(size_t(M), b.reshape({1, N})), 0).reshape(ys));
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  detail::check_act(x, "linear", "x");
  detail::check_same_device(x, w, "linear", "weight");
  detail::check_float(w, "linear", "weight");
  ERNIE_CHECK(w.ndim() == 2, "linear: weight ", shape_str(w.shape()), " must be 2-D [out, in]");
  ERNIE_CHECK(x.ndim() >= 1 && x.dim(-1) == w.dim(1), "linear: x ", shape_str(x.shape()),
              " last dim does not match weight ", shape_str(w.shape()), " [out, in]");
  const int64_t K = w.dim(1), N = w.dim(0), M = leading_rows(x);
  const Tensor b = checked_bias(x, bias, N, x.dtype());
  Shape ys = x.shape();
  ys.back() = N;
  Tensor y = Tensor::empty(ys, x.dtype(), x.device());
  if (M == 0 || N == 0) return y;
  if (K == 0) return bias_rows(ys, x.dtype(), x.device(), b, M, N);
  ERNIE_CHECK(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX, "linear: sizes too large");
  const Tensor wc = w.dtype() == x.dtype() ? w : cast(w, x.dtype());  // weights are normally stored in act dtype
  if (gemv_supported(x, wc, M)) gemv(x, wc, b, y, M, N, K);  // decoding: cuBLASLt's host cost would dominate
  else gemm_nt(x, wc, b, y, M, N, K);
  return y;
}

namespace {
// y[M, N] = x[M, K] · w[N, K]ᵀ (+ b[N]) for operands of Key type `dt`; fp8: sx, sw the scales. With a
// residual ([M, N] like y): y = residual + (the above) in the epilogue, or false (nothing run) where
// cuBLASLt has no algorithm for that.
bool gemm(int dt, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, int64_t M, int64_t N, int64_t K,
          const Tensor& sx = {}, const Tensor& sw = {}, const Tensor& residual = {}) {
  const int device = detail::dev(x);
  cudaStream_t st = stream(device);
  Handle& h = handle(device);
  const int out_dt = y.dtype() == DType::F32 ? kF32 : kBF16;
  const bool res = residual.defined();
  const int al_y = res ? std::min(alignment(y.raw()), alignment(residual.raw())) : alignment(y.raw());
  const Key key{device, M, N, K, dt, b.defined(), alignment(w.raw()), alignment(x.raw()), al_y,
                b.defined() ? alignment(b.raw()) : 0, out_dt, res ? kResidual : kPlain};
  auto ptr = [](const Tensor& t) -> const void* { return t.defined() ? t.raw() : nullptr; };
  const Operands ops{w.raw(), x.raw(), ptr(b), ptr(sw), ptr(sx), y.raw(), h.workspace.raw(), st, ptr(residual)};
  const Plan& p = plan_for(key, h.lt, ops);
  if (!p.supported || (res && p.post_scale)) return false;
  if (b.defined() && !p.post_scale)
    ERNIE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ops.bias, sizeof ops.bias));
  if (is_fp8(dt) && !p.post_scale) {
    ERNIE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ops.sw, sizeof ops.sw));
    ERNIE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &ops.sx, sizeof ops.sx));
  }
  ERNIE_CUBLAS_CHECK(run(h.lt, p, p.algo, ops));
  if (p.post_scale) scale_rows_cols(y, sx, sw, b);
  return true;
}
}  // namespace

void gemm_nt(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, int64_t M, int64_t N, int64_t K) {
  gemm(x.dtype() == DType::F32 ? kF32 : kBF16, x, w, b, y, M, N, K);
}

bool fp8_gemm_supported(int device) {
  const char* env = std::getenv("ERNIE_FP8_GEMM");
  return compute_capability(device) >= 89 && !(env && std::string(env) == "0");
}

bool fp8_row_scales_supported(int device) {
  static std::mutex mu;
  static std::map<int, bool> known;
  std::lock_guard<std::mutex> lk(mu);
  if (auto it = known.find(device); it != known.end()) return it->second;
  bool ok = false;
  if (fp8_gemm_supported(device)) {  // ask cuBLASLt's heuristic for a 256³ e4m3 GEMM with outer-vector scales
    cublasLtHandle_t lt = handle(device).lt;
    const Tensor scales = Tensor::empty({256}, DType::F32, Device{DeviceKind::CUDA, device});
    const void* sp = scales.raw();
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    const uint64_t ws = kWorkspace;
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    ok = cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sp, sizeof sp) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sp, sizeof sp) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&a, CUDA_R_8F_E4M3, 256, 256, 256) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&b, CUDA_R_8F_E4M3, 256, 256, 256) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, 256, 256, 256) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) ==
             CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, c, c, pref, 1, &res, &found) == CUBLAS_STATUS_SUCCESS && found > 0;
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    for (cublasLtMatrixLayout_t l : {a, b, c})
      if (l) cublasLtMatrixLayoutDestroy(l);
    if (op) cublasLtMatmulDescDestroy(op);
  }
  return known[device] = ok;
}

Tensor linear_q(const Tensor& x, const Tensor& q, const Tensor& scale, const Tensor& bias) {
  detail::check_act(x, "linear", "x");
  ops::rules::quantized_weight(q, scale, "linear");
  detail::check_same_device(x, q, "linear", "weight");
  ERNIE_CHECK(x.ndim() >= 1 && x.dim(-1) == q.dim(1), "linear: x ", shape_str(x.shape()),
              " last dim does not match weight ", shape_str(q.shape()), " [out, in]");
  const int64_t K = q.dim(1), N = q.dim(0), M = leading_rows(x);
  const Tensor b = checked_bias(x, bias, N, x.dtype());
  Shape ys = x.shape();
  ys.back() = N;
  if (M == 0 || N == 0) return Tensor::empty(ys, x.dtype(), x.device());
  if (K == 0) return bias_rows(ys, x.dtype(), x.device(), b, M, N);
  ERNIE_CHECK(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX, "linear: sizes too large");
  const Tensor x2 = x.reshape({M, K});
  if (q.dtype() == DType::F8_E4M3) {  // W8A8: the activations quantized per row, then the fp8 GEMM
    const ops::Weight a = quantize(x2, DType::F8_E4M3);
    return linear_fp8(a.w, a.scale, q, scale, b, x.dtype()).reshape(ys);
  }
  // int8 (W8A16): the weight expanded with its scales to the activation dtype for a float GEMM.
  Tensor y = Tensor::empty(ys, x.dtype(), x.device());
  gemm_nt(x2, dequantize_as(q, scale, x.dtype()), b, y, M, N, K);
  return y;
}

Tensor linear_fp8(const Tensor& x, const Tensor& sx, const Tensor& q, const Tensor& scale, const Tensor& bias,
                  DType out) {
  ops::rules::fp8_linear_operands(x, sx, q, scale);
  ERNIE_CHECK(x.device().is_cuda(), "linear: x is on ", x.device().str(), ", expected a CUDA device");
  detail::check_same_device(x, q, "linear", "weight");
  ERNIE_CHECK(out == DType::F32 || out == DType::BF16, "linear: output dtype must be F32 or BF16, not ",
              dtype_name(out));
  ERNIE_CHECK(x.dim(1) == q.dim(1), "linear: x ", shape_str(x.shape()), " last dim does not match weight ",
              shape_str(q.shape()), " [out, in]");
  const int64_t M = x.dim(0), N = q.dim(0), K = q.dim(1);
  const Tensor b = checked_bias(x, bias, N, out);
  if (M == 0 || N == 0) return Tensor::empty({M, N}, out, x.device());
  if (K == 0) return bias_rows({M, N}, out, x.device(), b, M, N);
  ERNIE_CHECK(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX, "linear: sizes too large");
  Tensor y = Tensor::empty({M, N}, out, x.device());
  if (out == DType::BF16 && K % 16 == 0 && N % 16 == 0 && fp8_gemm_supported(detail::dev(x))) {
    gemm(fp8_type(), x, q, b, y, M, N, K, sx, scale);
    return y;
  }
  // Otherwise the same numbers through a float GEMM: both operands' codes expanded with their scales.
  gemm_nt(dequantize_as(x, sx, out), dequantize_as(q, scale, out), b, y, M, N, K);
  return y;
}

Tensor linear_gated_residual(const Tensor& residual, const Tensor& gate, const Tensor& x, const Tensor& w,
                             const Tensor& scale) {
  auto composed = [&] {
    return gated_residual(residual, gate, scale.defined() ? linear_q(x, w, scale, {}) : linear(x, w, {}));
  };
  // The epilogue: fp8 weights on the tensor cores, one gate for every row (folded into the weight's row
  // scales: residual + gate · sx · sw · (qx · qᵀ)), the residual in y's shape and dtype, GEMM-sized work.
  // Anything else is the composition, which also gives the errors. (BF16 weights: cuBLASLt 13.1 has no
  // Hopper algorithm with a per-output alpha vector and beta 1, measured, so they compose too.)
  detail::check_act(x, "linear_gated_residual", "x");
  detail::check_act(residual, "linear_gated_residual", "residual");
  if (!scale.defined() || !w.defined() || w.dtype() != DType::F8_E4M3 || w.ndim() != 2 || x.ndim() < 2 ||
      x.dim(-1) != w.dim(1) || !gate.defined() || x.dtype() != DType::BF16)
    return composed();
  const int64_t K = w.dim(1), N = w.dim(0), M = x.numel() / std::max<int64_t>(K, 1);
  Shape ys = x.shape();
  ys.back() = N;
  if (gate.numel() != N || !dtype_is_float(gate.dtype()) || residual.shape() != ys || residual.dtype() != x.dtype() ||
      M <= 4 || K % 16 || N % 16 || M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || !fp8_gemm_supported(detail::dev(x)))
    return composed();
  detail::check_same_device(x, w, "linear_gated_residual", "weight");
  detail::check_same_device(x, gate, "linear_gated_residual", "gate");
  detail::check_same_device(x, residual, "linear_gated_residual", "residual");
  ops::rules::quantized_weight(w, scale, "linear_gated_residual");
  const ops::Weight a = quantize(x.reshape({M, K}), DType::F8_E4M3);
  return linear_fp8_gated_residual(residual, gate, a.w, a.scale, w, scale);
}

Tensor linear_fp8_gated_residual(const Tensor& residual, const Tensor& gate, const Tensor& x, const Tensor& sx,
                                 const Tensor& q, const Tensor& scale) {
  detail::check_act(residual, "linear_gated_residual", "residual");
  ops::rules::quantized_weight(x, sx, "linear_gated_residual (quantized x)");
  ops::rules::quantized_weight(q, scale, "linear_gated_residual");
  auto composed = [&] {
    const Tensor y = linear_fp8(x, sx, q, scale, {}, residual.dtype());
    ERNIE_CHECK(y.numel() == residual.numel(), "linear_gated_residual: linear gives ", shape_str(y.shape()),
                " for residual ", shape_str(residual.shape()));
    return gated_residual(residual, gate, y.reshape(residual.shape()));
  };
  const int64_t M = x.dim(0), N = q.dim(0), K = q.dim(1);
  // As linear_gated_residual's fp8 epilogue: one gate for every row, a BF16 residual of M rows of N, and
  // GEMM-sized work on the fp8 tensor cores; anything else (and every error) through the composition.
  const bool ok = gate.defined() && gate.numel() == N && dtype_is_float(gate.dtype()) && x.dim(1) == K &&
                  x.dtype() == DType::F8_E4M3 && q.dtype() == DType::F8_E4M3 && residual.dtype() == DType::BF16 &&
                  residual.dim(-1) == N &&
                  residual.numel() == M * N && M > 4 && K > 0 && N > 0 && M <= INT32_MAX && N <= INT32_MAX &&
                  K <= INT32_MAX && K % 16 == 0 && N % 16 == 0 && x.device() == q.device() &&
                  x.device() == residual.device() && gate.device() == x.device() &&
                  fp8_gemm_supported(detail::dev(x));
  if (!ok) return composed();
  const Tensor gated_scale = mul(cast(gate.reshape({N}), DType::F32), scale);  // the gate in the row scales
  Tensor y = Tensor::empty(residual.shape(), residual.dtype(), residual.device());
  return gemm(fp8_type(), x, q, {}, y, M, N, K, sx, gated_scale, residual) ? y : composed();
}

Tensor matmul_nt(const Tensor& a, const Tensor& b, DType out) {
  ERNIE_CHECK(a.ndim() == 2 && b.ndim() == 2 && a.dim(1) == b.dim(1) && a.dtype() == b.dtype() && a.dim(1) > 0,
              "matmul_nt: ", detail::shapes(a, b), " do not form a[M, K] · b[N, K]ᵀ");
  Tensor y = Tensor::empty({a.dim(0), b.dim(0)}, out, a.device());
  if (y.numel()) gemm_nt(a, b, Tensor(), y, a.dim(0), b.dim(0), a.dim(1));
  return y;
}

}  // namespace ernie::cuda
