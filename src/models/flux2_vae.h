// AutoencoderKLFlux2: the Flux2 KL VAE (decoder for text-to-image, encoder for image-to-image) and the
// pipeline's latent (de)normalisation with the BatchNorm running statistics. Reads like diffusers'
// autoencoder_kl_flux2.py and the Encoder/Decoder of vae.py.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "io/model_folder.h"
#include "ops/ops.h"

namespace ernie {

class Flux2Vae {
 public:
  // `decode_layout` is the layout of the decoder's activations between decode() and its NCHW image:
  // channels-last (the default) lets cuDNN run its NHWC tensor-core convolutions without converting every
  // input and output; the decoder's conv weights are stored in the matching layout (ops::conv_weight_nhwc).
  // The encoder runs NCHW.
  static Flux2Vae load(const ModelFolder& m, Device device, DType act, ops::Layout decode_layout = ops::Layout::NHWC);
  // The same from any source of tensors by diffusers name (`where` names it in errors).
  using WeightSource = std::function<Tensor(const std::string& name)>;
  static Flux2Vae build(const VaeConfig& cfg, Device device, DType act, const WeightSource& source,
                        const std::string& where, ops::Layout decode_layout = ops::Layout::NHWC);
  // Deterministic random weights of the config's sizes (convs/linears uniform with std 0.02, norms 1,
  // bn statistics 0/1), for speed tests at full size without a checkpoint (flux2_vae_random.cpp).
  static Flux2Vae random(const VaeConfig& cfg, Device device, DType act, uint64_t seed,
                         ops::Layout decode_layout = ops::Layout::NHWC);
  const VaeConfig& config() const { return cfg_; }
  Device device() const { return device_; }
  DType act_dtype() const { return act_; }
  ops::Layout decode_layout() const { return decode_layout_; }
  // z [B, latent_channels, h, w] -> image [B, 3, h*s, w*s] in [-1, 1] (not clamped).
  Tensor decode(const Tensor& z) const;
  // image [B, 3, H, W] in [-1, 1] -> posterior mean and logvar [B, latent_channels, H/s, W/s].
  std::pair<Tensor, Tensor> encode(const Tensor& image) const;

  struct Norm;
  // A GroupNorm as the decoder's up path and the encoder's down path call it: (x, groups, norm, eps, silu,
  // layout of x) -> the normalised x (SiLU fused when `silu`). Empty means ops::group_norm. The tiled VAE
  // (pipeline/vae_tiling.h) passes one that normalises every tile with whole-image statistics.
  using GroupNormFn =
      std::function<Tensor(const Tensor& x, int groups, const Norm& norm, float eps, bool silu, ops::Layout layout)>;
  // One step of the decoder's up path or the encoder's down path (a resnet, an up/downsampler, conv_in or
  // the output head) on an activation in act_dtype() on device(), in decode_layout() (decoder) or NCHW
  // (encoder). Steps refer to this object's weights.
  using Step = std::function<Tensor(const Tensor& x, const GroupNormFn& group_norm)>;
  // decode() in the parts the tiled decode needs: decode_mid runs post_quant_conv, decoder.conv_in and
  // decoder.mid_block at latent resolution (NCHW [B, L, h, w] -> [B, C, h, w] in decode_layout(); the
  // attention sees the whole latent); decode_up_steps are the rest in order: each up block's resnets and
  // upsampler, then conv_norm_out + SiLU + conv_out; decode_image turns their result into the NCHW image.
  Tensor decode_mid(const Tensor& z) const;
  std::vector<Step> decode_up_steps() const;
  Tensor decode_image(const Tensor& h) const;
  // encode() in two parts: encode_down_steps are encoder.conv_in and each down block's resnets and
  // downsampler ([B, 3, H, W] -> [B, C, H/s, W/s]); encode_mid the rest (encoder.mid_block, conv_norm_out +
  // SiLU, conv_out, quant_conv) on the whole of it, returning the posterior mean and logvar.
  std::vector<Step> encode_down_steps() const;
  std::pair<Tensor, Tensor> encode_mid(const Tensor& h) const;
  // DiT latents [B, 4L, h/2, w/2] -> de-normalised (bn running stats, eps 1e-5 as the pipeline uses) and
  // unpatchified [B, L, h, w], ready for decode().
  Tensor denormalize_and_unpatchify(const Tensor& latents) const;
  // Inverse: VAE latents [B, L, h, w] -> patchified and normalised DiT latents.
  Tensor patchify_and_normalize(const Tensor& z) const;

  // Weights, named after the diffusers modules (views of the checkpoint on `device`).
  struct Conv { Tensor weight, bias; };       // nn.Conv2d (bias always present in this VAE); the weight in
                                              // the layout its activations use ([O, kh, kw, I] for NHWC)
  struct Norm { Tensor weight, bias; };       // nn.GroupNorm affine
  struct Linear { Tensor weight, bias; };     // nn.Linear
  struct ResnetBlock2D {
    Norm norm1, norm2;
    Conv conv1, conv2, conv_shortcut;  // conv_shortcut (1x1) only when in != out channels
  };
  struct AttentionBlock {  // Attention(heads=1, group_norm, residual_connection) over H*W tokens
    Norm group_norm;
    Linear to_q, to_k, to_v, to_out;
  };
  struct MidBlock {  // UNetMidBlock2D: resnets[0], (attentions[0], resnets[1])
    ResnetBlock2D resnet0, resnet1;
    bool has_attention = false;
    AttentionBlock attention;
  };
  struct DownEncoderBlock2D {
    std::vector<ResnetBlock2D> resnets;
    Conv downsampler;  // Downsample2D conv (3x3, stride 2, after a (0,1,0,1) pad); undefined for the last block
  };
  struct UpDecoderBlock2D {
    std::vector<ResnetBlock2D> resnets;
    Conv upsampler;  // Upsample2D conv (3x3 after nearest 2x); undefined for the last block
  };
  struct Encoder {
    Conv conv_in, conv_out;
    std::vector<DownEncoderBlock2D> down_blocks;
    MidBlock mid_block;
    Norm conv_norm_out;
  };
  struct Decoder {
    Conv conv_in, conv_out;
    MidBlock mid_block;
    std::vector<UpDecoderBlock2D> up_blocks;
    Norm conv_norm_out;
  };

 private:
  Tensor to_act(const Tensor& x) const;  // onto device_ in act_
  // Per-row [B, 4L] shift/scale for ops::modulate (x * (1 + scale) + shift) on device_ in act_.
  std::pair<Tensor, Tensor> affine_rows(int64_t batch, const std::vector<float>& shift,
                                        const std::vector<float>& scale_minus_1) const;

  VaeConfig cfg_;
  Device device_;
  DType act_ = DType::F32;
  ops::Layout decode_layout_ = ops::Layout::NHWC;
  Encoder encoder_;
  Decoder decoder_;
  Conv quant_conv_, post_quant_conv_;  // 1x1; undefined when the config disables them
  std::vector<float> bn_mean_, bn_std_;  // bn.running_mean and sqrt(bn.running_var + 1e-5), 4L each
};

}  // namespace ernie
