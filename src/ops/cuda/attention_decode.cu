// Attention for a few query rows over a long cache (token-by-token decoding), split over the keys
// ("flash-decoding"), in one kernel. A block takes one chunk of keys for one (batch row, query row) and up to
// kHeads query heads that share one kv head (GQA), so each K/V row is read once for all of them. It walks its
// chunk in tiles: the tile's K and V rows go to shared memory (16-byte loads; K rows padded by one 4-byte word
// so that a thread per key reads them without bank conflicts), a thread per (key, quarter of the head dims)
// scores it for every head, a warp per head updates that head's online softmax over the tile, and each thread
// accumulates its share of the heads' output dims. With one chunk that is the output; else each block writes (max, sum, unnormalised
// output) per head to a workspace and the last block of the (row, head group) to finish merges the chunks
// (a ticket counter per group, reset by that block). Launched as a programmatic dependent (pdl.cuh): a block
// whose first tile lies in the caller's stable keys (a KV cache's earlier rows) loads it before waiting for
// the previous kernel.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ops/cuda/attention_internal.h"
#include "ops/cuda/common.h"
#include "ops/cuda/pdl.cuh"

namespace ernie::cuda::attn {

namespace {

constexpr int kWarps = 8, kThreads = 32 * kWarps, kHeads = 4, kMaxD = 256, kMaxSplits = 256;
constexpr int kMaxGroups = 32;                         // kv heads × head chunks per launch
constexpr int kMaxTickets = kMaxBatch * 4 * kMaxGroups;  // × (batch row, query row)
static_assert(kHeads <= kWarps, "each head of a block gets one warp for its softmax");

// Tiles of up to kTile keys, a chunk (one block's keys) of at least one tile. 64 measured best: 128-key tiles and
// chunks (72 KiB of shared memory) took 14.96 against 13.63 us at 1,100 keys, no better in the decode chain.
constexpr int kTile = 64, kTileBytes = 36 * 1024;  // with the ~9 KiB of static arrays, within the default 48 KiB
constexpr int kParts = kThreads / kTile, kWarpsPerPart = kTile / 32;  // a key's scores in kParts slices of D

// K rows in shared memory are D + kPad<T> elements apart: an odd number of 4-byte words.
template <class T>
constexpr int kPad = int(4 / sizeof(T));
// Shared memory of a tile of t keys' K and V rows.
template <class T>
__host__ __device__ size_t tile_bytes(int D, int t) {
  return size_t(t) * (2 * D + kPad<T>) * sizeof(T);
}
// Keys per tile: the most (of 64, 32, 16, 8) whose K and V rows fit kTileBytes.
template <class T>
__host__ __device__ int tile_keys(int D) {
  int t = kTile;
  while (t > 8 && tile_bytes<T>(D, t) > kTileBytes) t /= 2;
  return t;
}

// Element d of rope(x) for one head row x [D] with [D] tables, rounded as qkv_rope stores it.
template <class T>
__device__ __forceinline__ T rope_elem(const T* x, int d, int D, const float* cos, const float* sin) {
  const int half = D / 2;
  if (d < half) return from_f<T>(to_f(x[d]) * cos[d] - to_f(x[d + half]) * sin[d]);  // qkv_rope's lo
  return from_f<T>(to_f(x[d]) * cos[d] + to_f(x[d - half]) * sin[d]);                // and hi
}

// Finished blocks per (batch row · query row, head group) of the launch in flight; 0 between launches.
__device__ unsigned g_tickets[kMaxTickets];

// Rows [0, nt) of src (row stride ks elements, D wide) into dst with row stride `stride`.
template <class T>
__device__ __forceinline__ void load_tile(T* __restrict__ dst, int stride, const T* __restrict__ src, int64_t ks,
                                          int nt, int D) {
  constexpr int P = kPack<T>;
  if (D % P == 0 && ks % P == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0) {
    const int pr = D / P;
#pragma unroll 4
    for (int i = threadIdx.x; i < nt * pr; i += kThreads) {
      const int t = i / pr, c = i % pr;
      const Pack<T> v = *reinterpret_cast<const Pack<T>*>(src + t * ks + c * P);
#pragma unroll
      for (int e = 0; e < P; ++e) dst[t * stride + c * P + e] = v.v[e];
    }
  } else {
    for (int i = threadIdx.x; i < nt * D; i += kThreads) dst[(i / D) * stride + i % D] = src[(i / D) * ks + i % D];
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) decode_kernel(const Params p, float* __restrict__ part, int splits,
                                                          int keys_per_split, int chunks) {
  extern __shared__ __align__(16) unsigned char tile_bytes[];  // K [tile][D + kPad], then V [tile][D]
  __shared__ float sq[kHeads][kMaxD], ss[kHeads][kTile], sm[kHeads], sl[kHeads], scorr[kHeads], inv_l[kHeads];
  // The score slices while walking the tiles, the chunks' merge weights after them: the same floats.
  __shared__ float scratch[kParts * kHeads * kTile];
  static_assert(kParts * kTile == kMaxSplits, "scratch holds both");
  auto sp = reinterpret_cast<float(*)[kHeads][kTile]>(scratch);
  auto wsplit = reinterpret_cast<float(*)[kMaxSplits]>(scratch);
  __shared__ bool last;
  const int split = blockIdx.x, kh = blockIdx.y / chunks, chunk = blockIdx.y % chunks, z = blockIdx.z;
  const int b = z / p.Sq, row = z % p.Sq, G = p.Hq / p.Hkv, h0 = kh * G + chunk * kHeads;
  const int hb = min(kHeads, G - chunk * kHeads), D = p.D, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int tile = tile_keys<T>(D), kstride = D + kPad<T>;
  const int64_t ks = int64_t(p.Hkv) * D;
  const T* K = static_cast<const T*>(p.k) + int64_t(b) * p.Sk * ks + int64_t(kh) * D;
  const T* V = static_cast<const T*>(p.v) + int64_t(b) * p.Sk * ks + int64_t(kh) * D;
  T* o = static_cast<T*>(p.o) + int64_t(z) * p.Hq * D;
  int64_t n = p.kv_len[b];
  if (p.causal) n = min(n, p.q_offset + row + 1);
  const int64_t j1 = min(n, int64_t(split + 1) * keys_per_split);
  T* sk = reinterpret_cast<T*>(tile_bytes);
  T* sv = sk + tile * kstride;

  // A first tile of keys older than the previous kernel's writes comes in while that kernel finishes.
  const int64_t first = int64_t(split) * keys_per_split;
  const bool preloaded = first < j1 && first + min(int64_t(tile), j1 - first) <= p.stable_keys;
  if (preloaded) {
    const int nt = int(min(int64_t(tile), j1 - first));
    load_tile(sk, kstride, K + first * ks, ks, nt, D);
    load_tile(sv, D, V + first * ks, ks, nt, D);
  }
  pdl_wait();
  pdl_launch_dependents();
  const T* qkv = static_cast<const T*>(p.qkv);
  if (qkv) {  // q roped as qkv_rope stores it
    for (int i = tid; i < hb * D; i += kThreads)
      sq[i / D][i % D] = to_f(rope_elem<T>(qkv + int64_t(h0 + i / D) * D, i % D, D, p.cos_q, p.sin_q)) * p.scale;
  } else {
    const T* q = static_cast<const T*>(p.q) + int64_t(z) * p.Hq * D;  // z = b·Sq + row
    for (int i = tid; i < hb * D; i += kThreads) sq[i / D][i % D] = to_f(q[int64_t(h0) * D + i]) * p.scale;
  }
  if (tid < kHeads) sm[tid] = -INFINITY, sl[tid] = 0.f;
  // Thread tid owns outputs (head, dim) = idx / D, idx % D for idx = tid + k·kThreads < hb·D.
  constexpr int kOuts = kHeads * kMaxD / kThreads;
  float acc[kOuts] = {};
  for (int64_t t0 = first; t0 < j1; t0 += tile) {
    const int nt = int(min(int64_t(tile), j1 - t0));
    if (t0 != first || !preloaded) {
      __syncthreads();  // the previous tile is consumed
      // With qkv the last key (q_offset) is not in the cache yet: it comes from qkv, and this block's first
      // head chunk writes it there.
      const bool fresh = qkv && t0 + nt == n;
      load_tile(sk, kstride, K + t0 * ks, ks, nt - fresh, D);
      load_tile(sv, D, V + t0 * ks, ks, nt - fresh, D);
      if (fresh) {
        const T* kn = qkv + int64_t(p.Hq + kh) * D;
        const T* vn = qkv + int64_t(p.Hq + p.Hkv + kh) * D;
        for (int d = tid; d < D; d += kThreads) {
          const T kd = rope_elem<T>(kn, d, D, p.cos_k, p.sin_k), vd = vn[d];
          sk[(nt - 1) * kstride + d] = kd;
          sv[(nt - 1) * D + d] = vd;
          if (chunk == 0) {
            static_cast<T*>(p.k_row)[int64_t(kh) * D + d] = kd;
            static_cast<T*>(p.v_row)[int64_t(kh) * D + d] = vd;
          }
        }
      }
    }
    __syncthreads();  // the tile (and sq, sm, sl) are set
    {  // part `part` of the scores of key `key` for every head: dims [part·D/kParts, (part+1)·D/kParts)
      const int key = (warp % kWarpsPerPart) * 32 + lane, part = warp / kWarpsPerPart;
      if (key < nt) {
        float s[kHeads] = {};
        const T* kr = sk + key * kstride;
#pragma unroll 8
        for (int d = part * D / kParts; d < (part + 1) * D / kParts; ++d) {
          const float kd = to_f(kr[d]);
#pragma unroll
          for (int g = 0; g < kHeads; ++g) s[g] += sq[g][d] * kd;
        }
#pragma unroll
        for (int g = 0; g < kHeads; ++g) sp[part][g][key] = s[g];
      }
    }
    __syncthreads();
    if (warp < hb) {  // head `warp`: the tile's max, its weights e^(s - m) in place, the running sum
      float mt = -INFINITY;
      for (int t = lane; t < nt; t += 32) {
        float st = 0.f;
#pragma unroll
        for (int part = 0; part < kParts; ++part) st += sp[part][warp][t];
        ss[warp][t] = st;
        mt = fmaxf(mt, st);
      }
      for (int off = 16; off > 0; off >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, off));
      const float m_new = fmaxf(sm[warp], mt);
      float sum = 0.f;
      for (int t = lane; t < nt; t += 32) {
        const float e = __expf(ss[warp][t] - m_new);
        ss[warp][t] = e;
        sum += e;
      }
      sum = warp_sum(sum);
      __syncwarp();
      if (lane == 0) {
        const float corr = __expf(sm[warp] - m_new);
        scorr[warp] = corr, sl[warp] = sl[warp] * corr + sum, sm[warp] = m_new;
      }
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kOuts; ++k) {
      const int idx = tid + k * kThreads;
      if (idx >= hb * D) break;
      const int g = idx / D, d = idx % D;
      float a = acc[k] * scorr[g];
#pragma unroll 8
      for (int t = 0; t < nt; ++t) a += ss[g][t] * to_f(sv[t * D + d]);
      acc[k] = a;
    }
  }
  __syncthreads();  // sm, sl final

#pragma unroll
  for (int k = 0; k < kOuts; ++k) {
    const int idx = tid + k * kThreads;
    if (idx >= hb * D) break;
    const int g = idx / D, d = idx % D;
    if (splits == 1) {
      o[int64_t(h0) * D + idx] = from_f<T>(sl[g] > 0.f ? acc[k] / sl[g] : 0.f);
    } else {
      float* out = part + ((int64_t(z) * p.Hq + h0 + g) * splits + split) * (D + 2);
      out[2 + d] = acc[k];
      if (d == 0) out[0] = sm[g], out[1] = sl[g];
    }
  }
  if (splits == 1) return;

  // The last block of this (row, head group) merges the chunks.
  __threadfence();
  __syncthreads();
  unsigned* ticket = g_tickets + (int64_t(z) * gridDim.y + blockIdx.y);
  if (tid == 0) last = atomicAdd(ticket, 1u) == unsigned(splits - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  // Thread tid sums its outputs over the chunks, kBatch chunks at a time: a batch's loads are issued together,
  // and the first batch's while the warps below find the chunks' weights, so the merge costs a round trip to
  // L2 per kBatch chunks rather than one per chunk.
  constexpr int kBatch = 16;
  const float* in[kOuts];
  int head[kOuts];
  float a[kOuts] = {}, v[kBatch][kOuts];
  const int outs = (hb * D - tid + kThreads - 1) / kThreads;  // this thread's outputs (at most kOuts)
#pragma unroll
  for (int k = 0; k < kOuts; ++k) {
    const int idx = min(tid + k * kThreads, hb * D - 1);
    head[k] = idx / D;
    in[k] = part + (int64_t(z) * p.Hq + h0 + idx / D) * splits * (D + 2) + 2 + idx % D;
  }
  auto load_batch = [&](int s0) {
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
#pragma unroll
      for (int k = 0; k < kOuts; ++k) v[u][k] = s0 + u < splits && k < outs ? __ldcg(in[k] + (s0 + u) * (D + 2)) : 0.f;
  };
  load_batch(0);
  if (warp < hb) {  // warp g: the chunks' weights e^(m_s - M) for head g, from one round of loads
    const float* ml = part + (int64_t(z) * p.Hq + h0 + warp) * splits * (D + 2);
    constexpr int kPerLane = kMaxSplits / 32;
    float m[kPerLane], l[kPerLane], M = -INFINITY;
#pragma unroll
    for (int u = 0; u < kPerLane; ++u) {
      const int s = lane + 32 * u;
      m[u] = s < splits ? __ldcg(ml + s * (D + 2)) : -INFINITY;
      l[u] = s < splits ? __ldcg(ml + s * (D + 2) + 1) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < kPerLane; ++u) M = fmaxf(M, m[u]);
    for (int off = 16; off > 0; off >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
    float L = 0.f;
#pragma unroll
    for (int u = 0; u < kPerLane; ++u) {
      const float w = m[u] == -INFINITY ? 0.f : __expf(m[u] - M);
      if (lane + 32 * u < splits) wsplit[warp][lane + 32 * u] = w;
      L += l[u] * w;
    }
    L = warp_sum(L);
    if (lane == 0) inv_l[warp] = L > 0.f ? 1.f / L : 0.f;
  }
  __syncthreads();
  for (int s0 = 0; s0 < splits; s0 += kBatch) {
    if (s0 > 0) load_batch(s0);
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
#pragma unroll
      for (int k = 0; k < kOuts; ++k)
        if (s0 + u < splits) a[k] += v[u][k] * wsplit[head[k]][s0 + u];
  }
#pragma unroll
  for (int k = 0; k < kOuts; ++k)
    if (k < outs) o[int64_t(h0) * D + tid + k * kThreads] = from_f<T>(a[k] * inv_l[head[k]]);
  if (tid == 0) *ticket = 0;  // ready for the next launch
}

int head_chunks(int Hq, int Hkv) { return (Hq / Hkv + kHeads - 1) / kHeads; }

// The kernel for element type T on stream st (workspace grown as needed).
template <class T>
void launch(const Params& p, Tensor& workspace, cudaStream_t st) {
  const int keys_per_split = std::max(kTile, (p.Sk + kMaxSplits - 1) / kMaxSplits);
  const int splits = std::max(1, (p.Sk + keys_per_split - 1) / keys_per_split);
  const int chunks = head_chunks(p.Hq, p.Hkv);
  const int64_t floats = splits == 1 ? 0 : int64_t(p.B) * p.Sq * p.Hq * splits * (p.D + 2);
  if (workspace.numel() < floats) workspace = Tensor::empty({floats}, DType::F32, workspace.device());
  const dim3 grid(unsigned(splits), unsigned(p.Hkv * chunks), unsigned(p.B * p.Sq));
  launch_kernel(pdl_enabled(detail::dev(workspace)), decode_kernel<T>, grid, dim3(kThreads),
                tile_bytes<T>(p.D, tile_keys<T>(p.D)), st, p, static_cast<float*>(workspace.raw()), splits,
                keys_per_split, chunks);
}

}  // namespace

bool decode_supported(int Sq, int Hq, int Hkv, int D) {
  return Sq <= 4 && D <= kMaxD && Hkv > 0 && Hq % Hkv == 0 && Hkv * head_chunks(Hq, Hkv) <= kMaxGroups;
}

void decode(const Params& p, bool bf16, Tensor& workspace, cudaStream_t st) {
  // 64 keys per chunk measured best at 1,100 keys (16.4 us; 32 keys 18.2 us, 16 keys 24.1 us; 128 above).
  if (bf16) launch<__nv_bfloat16>(p, workspace, st);
  else launch<float>(p, workspace, st);
  ERNIE_CUDA_LAUNCH("attention (decode)");
}

}  // namespace ernie::cuda::attn
