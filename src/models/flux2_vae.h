// AutoencoderKLFlux2: the Flux2 KL VAE (decoder for text-to-image, encoder for image-to-image) and the
// pipeline's latent (de)normalisation with the BatchNorm running statistics. Reads like diffusers'
// autoencoder_kl_flux2.py and the Encoder/Decoder of vae.py.
#pragma once
#include "io/model_folder.h"

namespace ernie {

class Flux2Vae {
 public:
  static Flux2Vae load(const ModelFolder& m, Device device, DType act);
  const VaeConfig& config() const { return cfg_; }
  // z [B, latent_channels, h, w] -> image [B, 3, h*s, w*s] in [-1, 1] (not clamped).
  Tensor decode(const Tensor& z) const;
  // image [B, 3, H, W] in [-1, 1] -> posterior mean and logvar [B, latent_channels, H/s, W/s].
  std::pair<Tensor, Tensor> encode(const Tensor& image) const;
  // DiT latents [B, 4L, h/2, w/2] -> de-normalised (bn running stats, eps 1e-5 as the pipeline uses) and
  // unpatchified [B, L, h, w], ready for decode().
  Tensor denormalize_and_unpatchify(const Tensor& latents) const;
  // Inverse: VAE latents [B, L, h, w] -> patchified and normalised DiT latents.
  Tensor patchify_and_normalize(const Tensor& z) const;
};

}  // namespace ernie
