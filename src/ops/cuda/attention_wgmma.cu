// Flash attention for Hopper (sm_90a): bf16, head_dim 128, no causal mask (the DiT's joint attention).
// A block owns 128 query rows of one (batch, head): a producer warpgroup (one thread of it) brings Q and the 128-key K/V tiles into
// shared memory with the tensor memory accelerator (TMA), in the 128-byte swizzle wgmma reads (kStages
// stages, "full" and "empty" mbarriers per stage; rows past the tensor are zero-filled), and two consumer
// warpgroups of 64 rows each compute. Per tile j a consumer issues S_j = Q·K_jᵀ (one m64n128 wgmma chain
// from shared memory) and the previous tile's O += P_j-1·V_j-1 (P in registers as the A operand, V read
// MN-major), then runs the online softmax (log2 domain) on S_j. The two warpgroups take turns issuing
// (named barriers: "ping-pong"), so one's softmax overlaps the other's MMAs. The softmax's reference
// maximum moves lazily (only when passed by more than 2^8), so O's rescale is mostly skipped, and the mask
// is applied to the last tile only.
// Measured on the H200 (S 4296, 32 heads): 573–586 TFLOP/s at batch 1, 617–623 at batch 2 (545 / 582
// before the lazy maximum; without the ping-pong 450 / 479; three stages instead of two no faster).
// Masks: per-batch kv_len.
// The fp8 variant (kFp8, ops::attention_fp8) is the same pipeline on e4m3 codes: Q and K tiles are one
// 128-byte-wide box each, QKᵀ runs m64n128k32 e4m3 wgmmas, P is rounded to e4m3 in registers, and V comes
// transposed (vt: a head's 128 channels as rows of keys, K-major as 8-bit operands must be) with the keys of
// every 32 in fp8_key_order, which is the order the m16n8k32 A fragment holds the accumulator's columns in,
// so P needs no shuffles. Each 128-key tile of V has its own scale sv_j; P_j is multiplied by sv_j / sv_max
// inside the exponent, so O is kept in units of the largest tile scale. 584 TFLOP/s at batch 1, 620 at
// batch 2: no faster than bf16, as the softmax (MUFU exp2, the ping-pong's barrier waits) and
// not the tensor cores sets the pace (ncu: tensor pipe 34 % busy against bf16's 69 %).
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cudaTypedefs.h>

#include <cmath>

#include "ops/cuda/attention_internal.h"
#include "ops/cuda/common.h"
#include "ops/cuda/wgmma_sm90.cuh"

namespace ernie::cuda::attn {

namespace {

using bf16 = __nv_bfloat16;
[[maybe_unused]] constexpr int kD = 128, kBr = 128, kBc = 128;
[[maybe_unused]] constexpr int kConsumers = 256, kThreads = kConsumers + 128;  // two consumer warpgroups, a producer
[[maybe_unused]] constexpr int kBoxBytes = 128 * 128;                          // [128 rows][128 bytes]: one TMA box
[[maybe_unused]] constexpr int kStages = 2;
// The softmax reference moves when a row's maximum passes it by more (log2 units).
[[maybe_unused]] constexpr float kLazy = 8.f;
[[maybe_unused]] constexpr float kMinTileRatio = 0x1p-20f;  // fp8: the smallest f_j = sv_j / sv_max (see the softmax)
// A 128x128 tile: two 64-column boxes in bf16, one box in fp8.
template <bool kFp8>
struct Tiles {
  static constexpr int kBoxes = kFp8 ? 1 : 2, kBytes = kBoxes * kBoxBytes;
  static constexpr int kSmem = kBytes + 2 * kStages * kBytes + 1024;  // Q, K and V stages, alignment slack
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// The k-step of a tile's MMAs: 16 bf16 or 32 fp8 elements.
template <bool kFp8>
constexpr int kStepK = kFp8 ? 32 : 16;

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t pack_e4m3(float a, float b, float c, float d) {  // a in the low byte
  return uint32_t(__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3)) |
         uint32_t(__nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3)) << 16;
}

// A shared-memory descriptor moved `bytes` on (its address field counts 16-byte units; shared memory is small
// enough that it never carries): the loops add offsets to descriptors made once.
__device__ __forceinline__ uint64_t desc_at(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

// O += P·V over one 128-key tile (async; the caller fences and commits), `dv` the descriptor of the V tile
// (v_desc): bf16 V [keys][channels] read MN-major in 16-key slabs, fp8 vt [channels][keys] K-major in 32-key
// steps.
template <bool kFp8>
__device__ __forceinline__ uint64_t v_desc(const unsigned char* v) {
  return kFp8 ? wgmma::desc_sw128(v, 16, 1024) : wgmma::desc_sw128(v, 128 * 128, 1024);
}
template <bool kFp8>
__device__ __forceinline__ void pv(float (&o)[64], const uint32_t (&pa)[kBc / kStepK<kFp8>][4], uint64_t dv) {
#pragma unroll
  for (int kk = 0; kk < kBc / kStepK<kFp8>; ++kk) {
    if constexpr (kFp8) wgmma::mma_rs_m64n128k32_e4m3(o, pa[kk], desc_at(dv, kk * 32));
    else wgmma::mma_rs_m64n128k16_tb(o, pa[kk], desc_at(dv, kk * 16 * 128));
  }
}

#endif

template <bool kFp8>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_flash_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                       const __grid_constant__ CUtensorMap tv, const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Tl = Tiles<kFp8>;
  constexpr int kTileBytes = Tl::kBytes, kBoxes = Tl::kBoxes, kBoxCols = 128 / (kFp8 ? 1 : 2);
  extern __shared__ unsigned char smem_raw[];
  // full: the stage's TMA bytes arrived (1 arrival + bytes); empty: every consumer thread is done with it.
  __shared__ uint64_t q_full, k_full[kStages], v_full[kStages], k_empty[kStages], v_empty[kStages];
  unsigned char* sQ = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  unsigned char* sK = sQ + kTileBytes;
  unsigned char* sV = sK + kStages * kTileBytes;

  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kBr;
  const int kh = h / (p.Hq / p.Hkv);
  const int kv_len = p.kv_len[b];
  const int n_tiles = (kv_len + kBc - 1) / kBc;
  if (threadIdx.x == 0) {
    wgmma::mbar_init(&q_full, 1);
    for (int s = 0; s < kStages; ++s) {
      wgmma::mbar_init(&k_full[s], 1);
      wgmma::mbar_init(&v_full[s], 1);
      wgmma::mbar_init(&k_empty[s], kConsumers);
      wgmma::mbar_init(&v_empty[s], kConsumers);
    }
  }
  __syncthreads();

  // Warpgroup index, made visibly warp-uniform for the compiler (wgmma must not sit in divergent code).
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);
  if (wg == 2) {  // the producer: registers handed to the consumers, one thread issues every load
    wgmma::regs_dealloc<24>();
    if (threadIdx.x == kConsumers && n_tiles > 0) {
      wgmma::mbar_expect_tx(&q_full, kTileBytes);
      for (int box = 0; box < kBoxes; ++box)
        wgmma::tma_load_4d(sQ + box * kBoxBytes, &tq, &q_full, box * kBoxCols, q0, h, b);
      for (int j = 0; j < n_tiles; ++j) {
        const int s = j % kStages;
        const uint32_t round = uint32_t(j / kStages);
        if (j >= kStages) wgmma::mbar_wait(&k_empty[s], (round - 1) & 1);
        wgmma::mbar_expect_tx(&k_full[s], kTileBytes);
        for (int box = 0; box < kBoxes; ++box)
          wgmma::tma_load_4d(sK + s * kTileBytes + box * kBoxBytes, &tk, &k_full[s], box * kBoxCols, j * kBc, kh, b);
        if (j >= kStages) wgmma::mbar_wait(&v_empty[s], (round - 1) & 1);
        wgmma::mbar_expect_tx(&v_full[s], kTileBytes);
        if constexpr (kFp8)  // vt: the tile's 128 keys of all 128 channels
          wgmma::tma_load_4d(sV + s * kTileBytes, &tv, &v_full[s], j * kBc, 0, kh, b);
        else
          for (int box = 0; box < kBoxes; ++box)
            wgmma::tma_load_4d(sV + s * kTileBytes + box * kBoxBytes, &tv, &v_full[s], box * kBoxCols, j * kBc, kh, b);
      }
    }
    return;
  }
  wgmma::regs_alloc<240>();

  const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t qs = int64_t(p.Hq) * kD, o0 = int64_t(b) * p.Sq * qs + int64_t(h) * kD;
  const float* v_scale = kFp8 ? p.v_scale + (int64_t(b) * p.Hkv + kh) * ((p.Sk + kBc - 1) / kBc) : nullptr;
  float sv_max = 1.f;  // fp8: the largest scale of the tiles in use; O is kept in its units
  if constexpr (kFp8) {
    sv_max = 0.f;
    for (int i = 0; i < n_tiles; ++i) sv_max = fmaxf(sv_max, v_scale[i]);
  }
  // Ping-pong: warpgroup w issues its MMAs after waiting on named barrier 1 + w, then lets the other one
  // go (arrives on 2 - w). Warpgroup 1 lets warpgroup 0 start, and skips its last hand-over so that every
  // arrival is matched.
  if (wg == 1 && n_tiles > 0) wgmma::named_arrive(1, kConsumers);

  // Accumulator layout of m64nN (per warp 16 rows): d[4n + 2i + j] is row g + 8i, column 8n + 2t + j.
  float o[64], s[64];
  constexpr int kSteps = kBc / kStepK<kFp8>;  // P·V k-steps
  uint32_t pa[kSteps][4];  // P_j-1 as A fragments (bf16: m16n8k16 layout per 16 keys; fp8: m16n8k32 per 32)
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const float sl2 = p.scale * 1.4426950408889634f;
  const uint64_t dq = wgmma::desc_sw128(sQ + wg * 64 * 128, 16, 1024), dk = wgmma::desc_sw128(sK, 16, 1024);
  const uint64_t dv = v_desc<kFp8>(sV);
  if (n_tiles > 0) wgmma::mbar_wait(&q_full, 0);

  for (int j = 0; j < n_tiles; ++j) {
    const int st = j % kStages, pst = (j + kStages - 1) % kStages;
    float lf = 0.f, inv_f = 1.f;  // fp8: log2 f_j and 1 / f_j (see the softmax), ready before S_j is
    if constexpr (kFp8) {
      const float f = fmaxf(__fdiv_rn(v_scale[j], sv_max), kMinTileRatio);
      lf = log2f(f), inv_f = __frcp_rn(f);
    }
    wgmma::mbar_wait(&k_full[st], uint32_t(j / kStages) & 1);
    wgmma::named_sync(1 + wg, kConsumers);

    // S_j = Q K_jᵀ over head_dim (k-steps of 32 bytes along the 128-byte rows of each box), then
    // O += P_j-1 V_j-1 (pv), both async.
    wgmma::fence_regs(o);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kD / kStepK<kFp8>; ++kk) {  // each k-step 32 bytes into the 128-byte rows
      const int at = (kk / 4) * kBoxBytes + (kk % 4) * 32;
      const uint64_t da = desc_at(dq, at), db = desc_at(dk, st * kTileBytes + at);
      if constexpr (kFp8) wgmma::mma_ss_m64n128k32_e4m3(s, da, db, kk > 0);
      else wgmma::mma_ss_m64n128k16(s, da, db, kk > 0);
    }
    // The groups: bf16 commits after the branch, which compiles to an empty group (a dummy MMA) behind P·V,
    // so the wait below lets the softmax start only once P_j-1·V_j-1 is done too; fp8 commits P·V inside
    // the branch, so the softmax overlaps it. Each is the faster for its kernel on the H200 (bf16 the other
    // way: 1.46 against 1.02 ms at batch 2; fp8: 1.08 against 1.04).
    wgmma::commit();
    if (j > 0) {
      wgmma::mbar_wait(&v_full[pst], uint32_t((j - 1) / kStages) & 1);
      pv<kFp8>(o, pa, desc_at(dv, pst * kTileBytes));
      if constexpr (kFp8) wgmma::commit();
    }
    if constexpr (!kFp8) wgmma::commit();
    if (!(wg == 1 && j == n_tiles - 1)) wgmma::named_arrive(2 - wg, kConsumers);
    if (kFp8 && j == 0) wgmma::wait<0>();
    else wgmma::wait<1>();  // S_j is ready (K_j is free again)
    wgmma::fence_regs(s);
    wgmma::mbar_arrive(&k_empty[st]);

    // Keys past kv_len out: only the last tile has any (a uniform branch, off the common path).
    const int key0 = j * kBc;
    if (key0 + kBc > kv_len) {
#pragma unroll
      for (int n = 0; n < kBc / 8; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (key0 + n * 8 + 2 * t + (i & 1) >= kv_len) s[4 * n + i] = -INFINITY;
    }
    // Online softmax in the log2 domain (each row's 128 keys live in the 4 threads of a quad): p =
    // 2^(scale·log2(e)·s - m). m, the reference, moves only when the tile's maximum passes it by more than
    // kLazy (so p <= 2^kLazy) — most tiles leave it, and O's rescale is skipped when no row of the warp
    // moved. fp8: P·V_j is computed as (p·f_j)·V8_j with f_j = sv_j / sv_max, folded into the exponent,
    // so O stays in units of sv_max.
    float corr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < kBc / 8; ++n) mx = fmaxf(mx, fmaxf(s[4 * n + 2 * r], s[4 * n + 2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = mx * sl2 > m[r] + kLazy ? mx * sl2 : m[r];  // sl2 > 0; a finite mx passes -inf
      corr[r] = wgmma::ex2(m[r] - m_new);
      const float c = m_new - lf;
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < kBc / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& v = s[4 * n + 2 * r + e];
          v = wgmma::ex2(fmaf(v, sl2, -c));
          sum += v;
        }
      l[r] = l[r] * corr[r] + sum * inv_f;
      m[r] = m_new;
    }

    wgmma::wait<0>();  // O now holds P_j-1 V_j-1 (V_j-1 is free again): rescale it to the new maxima, hand P_j on
    wgmma::fence_regs(o);
    if (j > 0) wgmma::mbar_arrive(&v_empty[pst]);
    if (__any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f)) {
#pragma unroll
      for (int n = 0; n < kD / 8; ++n)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          o[4 * n + 2 * r] *= corr[r];
          o[4 * n + 2 * r + 1] *= corr[r];
        }
    }
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if constexpr (kFp8) {  // register i: row g + 8·(i % 2), accumulator chunks 4kk + 2·(i / 2) and the next
          const float* c = s + 16 * kk + 8 * (i / 2) + 2 * (i % 2);
          pa[kk][i] = pack_e4m3(c[0], c[1], c[4], c[5]);
        } else {
          pa[kk][i] = pack_bf16(s[8 * kk + 2 * i], s[8 * kk + 2 * i + 1]);
        }
      }
  }
  if (n_tiles > 0) {  // O += P_last V_last
    const int lst = (n_tiles - 1) % kStages;
    wgmma::mbar_wait(&v_full[lst], uint32_t((n_tiles - 1) / kStages) & 1);
    wgmma::fence_regs(o);
    wgmma::fence();
    pv<kFp8>(o, pa, desc_at(dv, lst * kTileBytes));
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_regs(o);
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = l[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float inv = sum > 0.f ? sv_max / sum : 0.f;
    const int row = q0 + wg * 64 + warp * 16 + g + 8 * r;
    if (row >= p.Sq) continue;
    const int64_t at = o0 + int64_t(row) * qs + 2 * t;
    if (kFp8 && p.o_f32) {
#pragma unroll
      for (int n = 0; n < kD / 8; ++n)
        *reinterpret_cast<float2*>(static_cast<float*>(p.o) + at + n * 8) =
            make_float2(o[4 * n + 2 * r] * inv, o[4 * n + 2 * r + 1] * inv);
      continue;
    }
#pragma unroll
    for (int n = 0; n < kD / 8; ++n)
      *reinterpret_cast<__nv_bfloat162*>(static_cast<bf16*>(p.o) + at + n * 8) =
          __floats2bfloat162_rn(o[4 * n + 2 * r] * inv, o[4 * n + 2 * r + 1] * inv);
  }
#else
  __trap();  // built only as sm_90a machine code; the dispatcher checks the device first
#endif
}

}  // namespace

bool wgmma_supported(int D, bool causal, float scale, int device) {
  if (D != kD || causal || !(scale > 0.f)) return false;
  return hopper_code(device);  // sm_90a code, and only where the runtime loaded it (not a compute_80 JIT)
}

namespace {

// A 4-D tensor [dim3][dim2][dim1][dim0] of 1- or 2-byte elements (contiguous) as a TMA map with [128 rows of
// dim1, 128 bytes of dim0] boxes in the 128-byte swizzle (the driver's encoder is looked up through the
// runtime, so nothing links libcuda): q, k, v [batch, rows, heads, 128] as [batch][heads][rows][128] with
// the rows strided, fp8 vt [batch, heads, 128, keys] as it is.
CUtensorMap tensor_map(const void* base, int esize, const cuuint64_t (&dims)[4], const cuuint64_t (&strides)[3]) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    ERNIE_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
    ERNIE_CHECK(q == cudaDriverEntryPointSuccess && fn, "attention: the CUDA driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  CUtensorMap m{};
  const cuuint32_t box[4] = {cuuint32_t(128 / esize), 128, 1, 1}, elem_strides[4] = {1, 1, 1, 1};
  const CUresult r = encode(&m, esize == 2 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8, 4,
                            const_cast<void*>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  ERNIE_CHECK(r == CUDA_SUCCESS, "attention: cuTensorMapEncodeTiled failed (error ", std::to_string(int(r)), ")");
  return m;
}
// q, k or v [batch, rows, heads, 128].
CUtensorMap rows_map(const void* base, int esize, int rows, int heads, int batch) {
  const cuuint64_t e = cuuint64_t(esize);
  return tensor_map(base, esize, {cuuint64_t(kD), cuuint64_t(rows), cuuint64_t(heads), cuuint64_t(batch)},
                    {cuuint64_t(heads) * kD * e, kD * e, cuuint64_t(rows) * heads * kD * e});
}

template <bool kFp8>
void launch(const Params& p, const CUtensorMap& tq, const CUtensorMap& tk, const CUtensorMap& tv, cudaStream_t st) {
  static bool configured = [] {
    ERNIE_CUDA_CHECK(cudaFuncSetAttribute(wgmma_flash_kernel<kFp8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          Tiles<kFp8>::kSmem));
    return true;
  }();
  (void)configured;
  const dim3 grid(unsigned((p.Sq + kBr - 1) / kBr), unsigned(p.Hq), unsigned(p.B));
  wgmma_flash_kernel<kFp8><<<grid, kThreads, Tiles<kFp8>::kSmem, st>>>(tq, tk, tv, p);
  ERNIE_CUDA_LAUNCH(kFp8 ? "attention (wgmma, fp8)" : "attention (wgmma)");
}

}  // namespace

void flash_wgmma(const Params& p, cudaStream_t st) {
  launch<false>(p, rows_map(p.q, 2, p.Sq, p.Hq, p.B), rows_map(p.k, 2, p.Sk, p.Hkv, p.B),
                rows_map(p.v, 2, p.Sk, p.Hkv, p.B), st);
}

void flash_wgmma_fp8(const Params& p, cudaStream_t st) {
  const cuuint64_t vt_len = cuuint64_t(p.vt_len);
  const CUtensorMap tv = tensor_map(p.v, 1, {vt_len, cuuint64_t(kD), cuuint64_t(p.Hkv), cuuint64_t(p.B)},
                                    {vt_len, vt_len * kD, vt_len * kD * p.Hkv});
  launch<true>(p, rows_map(p.q, 1, p.Sq, p.Hq, p.B), rows_map(p.k, 1, p.Sk, p.Hkv, p.B), tv, st);
}

}  // namespace ernie::cuda::attn
