// Shared between attention.cpp (dispatch) and the kernels' translation units.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"
#include "ops/ops.h"

namespace ernie::cuda::attn {

constexpr int kMaxBatch = 64;  // kv_len travels in the kernel parameters

struct Params {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  int B, Sq, Sk, Hq, Hkv, D;
  float scale;
  bool causal;
  int64_t q_offset;
  int64_t stable_keys;  // AttentionMask::stable_keys
  // The decode kernel only, one query row (qkv_rope_attention): q and the key/value row at q_offset come from
  // a fused projection `qkv` [(Hq + 2·Hkv)·D], roped with the [D] tables; the new row goes to k_row / v_row
  // (the caches' row q_offset, [Hkv, D]) as well. Null: q, k and v as they are.
  const void* qkv;
  const float *cos_q, *sin_q, *cos_k, *sin_k;
  void* k_row;
  void* v_row;
  // The fp8 kernel only (ops::Qkv8): q and k e4m3 codes, v the transposed codes vt [B, Hkv, D, vt_len] and
  // v_scale [B, Hkv, ceil(Sk / 128)]; o BF16 or F32 (o_f32).
  const float* v_scale;
  int vt_len;
  bool o_f32;
  int kv_len[kMaxBatch];  // per batch row, already clipped to [0, Sk]
};

// bf16, head_dim in {16, 32, 64, 128}, 16-byte aligned rows: FlashAttention-2 with mma.sync.
bool flash_supported(int D);
void flash_bf16(const Params& p, cudaStream_t st);
// bf16, head_dim 128, not causal, positive scale, on a compute-capability 9.0 device: the Hopper kernel.
bool wgmma_supported(int D, bool causal, float scale, int device);
void flash_wgmma(const Params& p, cudaStream_t st);
// The same kernel on fp8 inputs (ops::attention_fp8), under the same conditions.
void flash_wgmma_fp8(const Params& p, cudaStream_t st);
// Any head_dim <= 256, F32 or BF16 (`bf16`): one warp per query row, online softmax.
void simple(const Params& p, bool bf16, cudaStream_t st);
// Up to 4 query rows (decoding), head_dim <= 256, F32 or BF16, GQA groups of any size (up to 32 kv heads per
// 4 query heads of a group): the keys split in chunks over the GPU, then merged by the last block of each
// (`workspace`: an F32 device tensor, grown as needed).
bool decode_supported(int Sq, int Hq, int Hkv, int D);
void decode(const Params& p, bool bf16, Tensor& workspace, cudaStream_t st);
// Any head_dim, F32 or BF16: S = q·kᵀ (fp32) and P·v through cuBLASLt around a masked row softmax.
void gemm_path(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, float scale, const ops::AttentionMask& m);

}  // namespace ernie::cuda::attn
