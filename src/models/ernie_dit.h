// ErnieImageTransformer2DModel: the 8B single-stream DiT with shared AdaLN. Reads like diffusers'
// transformer_ernie_image.py (names follow it), written against the op set.
//
// Layout: the reference runs [S, B, hidden]; we run [B, S, hidden] (the op set's convention). The sequence
// is the image tokens (row-major over H×W) followed by the Tmax text tokens; padded text keys are masked
// out of attention (a valid key prefix of N_img + text_lens[b] per batch row).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "models/quant_policy.h"
#include "io/model_folder.h"
#include "models/block_streamer.h"
#include "models/host_weight_cache.h"
#include "models/lora_merge.h"
#include "ops/ops.h"

namespace ernie {

class Communicator;

class ErnieDit {
 public:
  // Weights from transformer/ (checked against the config first). On the CPU they stay the mmap'd views
  // (BF16 in the release, converted on the fly by the CPU ops); on CUDA they are uploaded and, with BF16
  // activations, cast to BF16 on the device.
  // With `stream_blocks` (CUDA, --offload blocks) the transformer blocks stay in pinned host memory and
  // are streamed to the GPU during each forward (BlockStreamer); the rest stays resident. Same kernels, so
  // the same result as resident.
  // 8-bit weights: linear weights stored quantized (a converted file) stay quantized (ops::Weight; fp8
  // runs W8A8, int8 W8A16, see ops::linear). With `quantize` (I8 or F8_E4M3) the float linear weights that
  // QuantPolicy picks are quantized at load, on the model's device.
  // `loras` are merged into the weights they change (models/lora_merge.h) before any cast or quantization; a
  // weight stored 8-bit is expanded, merged and quantized again (its static activation scale kept), unless
  // `lora_at_runtime`: then the block linears that are 8-bit keep their exact base weights and run the
  // adapters beside them as a low-rank side GEMM (float weights are merged either way).
  // With `cache`, the stored weights are read through it (pinned host copies: a load after the first, e.g.
  // for another LoRA set, uploads from them).
  static ErnieDit load(const ModelFolder& m, Device device, DType act, bool stream_blocks = false,
                       std::optional<DType> quantize = std::nullopt, const QuantPolicy& policy = {},
                       const LoraSet& loras = {}, bool lora_at_runtime = false, HostWeightCache* cache = nullptr);
  // The same model with deterministic random weights (linear weights and biases ~ U with std 0.02, norm
  // weights 1) built on the host as BF16 like the release, then placed as load() does. For speed tests:
  // speed does not depend on the values.
  static ErnieDit random(const DitConfig& cfg, Device device, DType act, uint64_t seed, bool stream_blocks = false,
                         std::optional<DType> quantize = std::nullopt, const QuantPolicy& policy = {},
                         const LoraSet& loras = {}, bool lora_at_runtime = false);

  const DitConfig& config() const { return cfg_; }
  size_t weight_bytes() const;  // bytes of all weights as placed on the device (streamed: the two slots)
  std::optional<DType> quantized_dtype() const;  // I8 or F8_E4M3 when some block weight is 8-bit, else none
  BlockStreamer* block_streamer() const { return streamer_.get(); }  // null unless streaming blocks

  // hidden_states [B, C, H, W] (patchified latents), timestep [B] (sigma*1000 as the reference passes it),
  // text_bth [B, Tmax, text_in_dim] zero-padded, text_lens[B] <= Tmax. Inputs may live on the host in any
  // float dtype; they are moved to the model's device and activation dtype. Returns [B, out_channels, H, W]
  // on the model's device in the activation dtype. Throws Error naming the argument on bad shapes.
  // `observe`, when set, sees the hidden states [B, S, hidden] after each block (diagnostics: the per-layer
  // error of quantized weights); it keeps the rows padded, which without it run packed when their text
  // lengths differ (see forward in ernie_dit.cpp: the same output).
  using LayerObserver = std::function<void(int layer, const Tensor& hidden)>;
  Tensor forward(const Tensor& hidden_states, const std::vector<float>& timestep, const Tensor& text_bth,
                 const std::vector<int64_t>& text_lens, const LayerObserver& observe = {}) const;
  // Ulysses sequence parallelism (--parallel ulysses, engine/parallel/): every rank of `seq` passes the same
  // inputs and runs the per-token work of its 1/n of the sequence (image tokens, then the text padded so n
  // divides the length; rows padded, never packed); around each attention an all-to-all turns the token split into
  // a head split (heads % n == 0) and another turns it back. Returns forward()'s result on every rank.
  Tensor forward_seq_parallel(Communicator& seq, const Tensor& hidden_states, const std::vector<float>& timestep,
                              const Tensor& text_bth, const std::vector<int64_t>& text_lens) const;

  // Calibration (convert --calibrate): `f(weight name, x)` sees the float input x of every block linear
  // (name as in the checkpoint, e.g. "layers.3.mlp.gate_proj.weight") in each forward. Empty: off.
  using InputObserver = std::function<void(const std::string& weight, const Tensor& x)>;
  void set_input_observer(InputObserver f) { input_observer_ = std::move(f); }

  // fp8 attention (ops::attention_fp8: q, k, P and v in e4m3 on Hopper's fp8 tensor cores) in the blocks whose
  // fused q|k|v projection is fp8, where the device runs it (attention_fp8_supported); elsewhere, and in the
  // blocks kept bf16, attention stays bf16. Off by default.
  void set_attention_fp8(bool on) { attention_fp8_ = on; }
  bool attention_fp8() const { return attention_fp8_; }
  bool runs_fp8_attention() const;  // set, an fp8 DiT and a device that runs it: some block uses it

  struct Block {
    Tensor adaLN_sa_ln, adaLN_mlp_ln;                    // RMSNorm weights [hidden]
    ops::Weight to_q, to_k, to_v, to_out;                // self_attention (no biases)
    Tensor norm_q, norm_k;                               // [head_dim]
    ops::Weight to_qkv;  // on CUDA [to_q; to_k; to_v] as one [3·hidden, hidden] GEMM (to_q/k/v then unset)
    ops::Weight gate_proj, up_proj, linear_fc2;          // mlp (no biases)
    // Adapters kept unmerged on 8-bit weights (lora_at_runtime), resident even when the block streams.
    struct Sides {
      LoraSide to_q, to_k, to_v, to_qkv, to_out, gate_proj, up_proj, linear_fc2;
      bool any() const;
    } lora;
    std::vector<Tensor*> tensors();                      // every tensor (weights and scales), in this order
    std::vector<ops::Weight*> linears();                 // to_q, to_k, to_v, to_qkv, to_out, gate_proj, up_proj, linear_fc2
  };

 private:
  // The six AdaLN chunks shared by every layer, each [B, hidden].
  struct Modulation {
    Tensor shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp;
  };
  // RoPE tables for the whole sequence, full width: [B, S, head_dim] F32 on the model's device ([1, ΣS_b,
  // head_dim] for packed rows).
  struct Rotary {
    Tensor cos, sin;
  };
  // The last tables built, by (text_lens, Hp, Wp, Tmax, packed): every step of a generation asks for the same
  // ones, and building them on the host costs ~10 ms at 1024².
  struct RotaryCache {
    std::mutex mu;
    std::vector<int64_t> key;
    Rotary tables;
  };

  // Fills every weight from `source` (tensor name as in the checkpoint -> host weight of that name's shape,
  // float or already quantized); `quantize` as in load().
  using WeightSource = std::function<ops::Weight(const std::string& name)>;
  static ErnieDit build(const DitConfig& cfg, Device device, DType act, const WeightSource& source,
                        bool stream_blocks, std::optional<DType> quantize, const QuantPolicy& policy,
                        const LoraSet& loras, bool lora_at_runtime = false);
  Tensor to_act(const Tensor& input) const;    // user input -> device, activation dtype

  Tensor x_embedder(const Tensor& hidden_states) const;                       // [B, C, H, W] -> [B, H*W, hidden]
  Tensor time_proj(const std::vector<float>& timestep) const;                 // sinusoidal [B, hidden]
  Tensor time_embedding(const Tensor& sample) const;                          // c [B, hidden]
  Modulation adaLN_modulation(const Tensor& c) const;
  // packed: each row's image tokens and valid text only, the rows one after another (see forward).
  Rotary pos_embed(const std::vector<int64_t>& text_lens, int64_t Hp, int64_t Wp, int64_t Tmax, bool packed) const;
  Rotary cached_pos_embed(const std::vector<int64_t>& text_lens, int64_t Hp, int64_t Wp, int64_t Tmax,
                          bool packed) const;
  // The input of a block's linears: the activation x [B, S, in], or, when the linears reading it are all
  // fp8, only its fp8 codes x8 [B·S, in] (made by the producing op in the same pass: per token, or with the
  // readers' one static scale), which every one of those GEMMs then shares.
  struct LinearInput {
    Tensor x;
    ops::Weight x8;
    int64_t B = 0, S = 0;
  };
  // rms_norm_modulate as a LinearInput for `readers` (fp8 codes when they are all fp8).
  // `codes` false: keep the float input (a reader has a LoRA side, which needs it).
  LinearInput norm_modulate(const Tensor& x, const Tensor& weight, const Tensor& shift, const Tensor& scale,
                            std::initializer_list<const ops::Weight*> readers, bool codes) const;
  Tensor linear(const LinearInput& in, const ops::Weight& w, const LoraSide& side = {}) const;
  // `seq`: Ulysses, x holds this rank's tokens (see forward_seq_parallel).
  Tensor self_attention(const Block& blk, const LinearInput& x, const Rotary& rope, const ops::AttentionMask& mask,
                        Communicator* seq) const;
  LinearInput mlp(const Block& blk, const LinearInput& x) const;  // linear_fc2's input
  Tensor layer(int index, const Block& blk, const Tensor& x, const Rotary& rope, const Modulation& mod,
               const ops::AttentionMask& mask, Communicator* seq = nullptr) const;
  Tensor forward_impl(const Tensor& hidden_states, const std::vector<float>& timestep, const Tensor& text_bth,
                      const std::vector<int64_t>& text_lens, const LayerObserver& observe, Communicator* seq) const;
  Tensor final_norm(const Tensor& x, const Tensor& c) const;

  DitConfig cfg_;
  Device device_;
  DType act_ = DType::F32;
  bool attention_fp8_ = false;
  Tensor x_embedder_w, x_embedder_b, text_proj, time_linear_1_w, time_linear_1_b, time_linear_2_w, time_linear_2_b;
  Tensor adaLN_modulation_w, adaLN_modulation_b, final_norm_w, final_norm_b, final_linear_w, final_linear_b;
  std::vector<Block> layers_;                   // resident blocks (empty when streamed)
  std::shared_ptr<BlockStreamer> streamer_;     // streamed blocks: the host copies and two device slots
  std::vector<Block> streamed_;                 // streamed blocks as views into their slots
  std::shared_ptr<RotaryCache> rotary_cache_ = std::make_shared<RotaryCache>();
  InputObserver input_observer_;
};

}  // namespace ernie
