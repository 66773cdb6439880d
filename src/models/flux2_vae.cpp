// AutoencoderKLFlux2 forward, written against the op set. Each function mirrors a diffusers module:
// ResnetBlock2D (resnet.py), Attention with AttnProcessor2_0 (attention_processor.py), UNetMidBlock2D,
// DownEncoderBlock2D / UpDecoderBlock2D (unet_2d_blocks.py), Encoder / Decoder (vae.py), and
// AutoencoderKLFlux2.encode/decode (autoencoder_kl_flux2.py). Every GroupNorm in this VAE uses eps 1e-6
// and every output_scale_factor / rescale_output_factor is 1, so residual sums are not rescaled. Each
// function takes the layout of its activations (`lay`): the decoder's is decode_layout(), the encoder's NCHW.
#include "models/flux2_vae.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "ops/ops.h"

namespace ernie {

namespace {
constexpr float kNormEps = 1e-6f;      // resnet_eps / GroupNorm eps of the Encoder and Decoder
constexpr float kBnEps = 1e-5f;        // the ERNIE pipeline's de-normalisation eps (not config.batch_norm_eps)
constexpr float kLogvarMin = -30.0f;   // DiagonalGaussianDistribution clamps logvar to [-30, 20]
constexpr float kLogvarMax = 20.0f;

using Vae = Flux2Vae;
using ops::Layout;
std::string I(int64_t i) { return std::to_string(i); }

Tensor conv(const Tensor& x, const Vae::Conv& c, int stride, int pad, Layout lay) {
  return ops::conv2d(x, c.weight, c.bias, stride, pad, lay);
}

// nn.GroupNorm (eps 1e-6), SiLU fused when `silu`; through `gn` when the caller gave one (tiled VAE).
Tensor group_norm(const Tensor& x, const Vae::Norm& n, int groups, bool silu, Layout lay, const Vae::GroupNormFn& gn) {
  return gn ? gn(x, groups, n, kNormEps, silu, lay) : ops::group_norm(x, groups, n.weight, n.bias, kNormEps, silu, lay);
}

// ResnetBlock2D (temb None, time_embedding_norm "default"):
//   h = conv1(silu(norm1(x))); h = conv2(silu(norm2(h))); out = shortcut(x) + h.
Tensor resnet_block(const Tensor& x, const Vae::ResnetBlock2D& r, int groups, Layout lay,
                    const Vae::GroupNormFn& gn = {}) {
  Tensor h = group_norm(x, r.norm1, groups, /*silu=*/true, lay, gn);
  h = conv(h, r.conv1, 1, 1, lay);
  h = group_norm(h, r.norm2, groups, /*silu=*/true, lay, gn);
  h = conv(h, r.conv2, 1, 1, lay);
  const Tensor shortcut = r.conv_shortcut.weight.defined() ? conv(x, r.conv_shortcut, 1, 0, lay) : x;
  return ops::add(shortcut, h);
}

// Attention(query_dim=C, heads=1, dim_head=C, norm_num_groups, residual_connection=True, bias=True) on
// [B, C, H, W]: group norm, tokens [B, H*W, C], single-head softmax(q kᵀ / sqrt(C)) v, to_out, + input.
// Channels-last activations are the tokens already.
Tensor attention_block(const Tensor& x, const Vae::AttentionBlock& a, int groups, Layout lay) {
  const bool nhwc = lay == Layout::NHWC;
  const int64_t B = x.dim(0), C = x.dim(nhwc ? 3 : 1), H = x.dim(nhwc ? 1 : 2), W = x.dim(nhwc ? 2 : 3);
  Tensor h = ops::group_norm(x, groups, a.group_norm.weight, a.group_norm.bias, kNormEps, false, lay);
  h = (nhwc ? h : ops::permute(h, {0, 2, 3, 1})).reshape({B, H * W, C});
  const Tensor q = ops::linear(h, a.to_q.weight, a.to_q.bias).reshape({B, H * W, 1, C});
  const Tensor k = ops::linear(h, a.to_k.weight, a.to_k.bias).reshape({B, H * W, 1, C});
  const Tensor v = ops::linear(h, a.to_v.weight, a.to_v.bias).reshape({B, H * W, 1, C});
  h = ops::attention(q, k, v, 1.0f / std::sqrt(float(C))).reshape({B, H * W, C});
  h = ops::linear(h, a.to_out.weight, a.to_out.bias);
  h = h.reshape({B, H, W, C});
  return ops::add(nhwc ? h : ops::permute(h, {0, 3, 1, 2}), x);
}

// UNetMidBlock2D: resnets[0], then attentions[0] (when added) and resnets[1].
Tensor mid_block(const Tensor& x, const Vae::MidBlock& m, int groups, Layout lay) {
  Tensor h = resnet_block(x, m.resnet0, groups, lay);
  if (m.has_attention) h = attention_block(h, m.attention, groups, lay);
  return resnet_block(h, m.resnet1, groups, lay);
}

// Downsample2D(use_conv, padding=0): zero-pad right and bottom by one, then a 3x3 stride-2 conv (NCHW).
Tensor downsample(const Tensor& x, const Vae::Conv& c) {
  return conv(ops::pad2d(x, 0, 1, 0, 1), c, 2, 0, Layout::NCHW);
}

// Upsample2D(use_conv): nearest-neighbour 2x, then a 3x3 conv.
Tensor upsample(const Tensor& x, const Vae::Conv& c, Layout lay) {
  return conv(ops::upsample_nearest2x(x, lay), c, 1, 1, lay);
}

// Encoder.forward (NCHW) in two parts: conv_in and the down blocks (at image resolution, as steps the tiled
// encode runs over all tiles one at a time) ...
std::vector<Vae::Step> encoder_down_steps(const Vae::Encoder& e, int groups) {
  std::vector<Vae::Step> steps;
  steps.push_back([&e](const Tensor& x, const Vae::GroupNormFn&) { return conv(x, e.conv_in, 1, 1, Layout::NCHW); });
  for (const auto& block : e.down_blocks) {
    for (const auto& r : block.resnets)
      steps.push_back([&r, groups](const Tensor& h, const Vae::GroupNormFn& gn) {
        return resnet_block(h, r, groups, Layout::NCHW, gn);
      });
    if (block.downsampler.weight.defined())
      steps.push_back([&block](const Tensor& h, const Vae::GroupNormFn&) { return downsample(h, block.downsampler); });
  }
  return steps;
}

// ... then the mid block, conv_norm_out + SiLU and conv_out (2 * latent channels), at latent resolution.
Tensor encoder_mid(const Tensor& h, const Vae::Encoder& e, int groups) {
  Tensor x = mid_block(h, e.mid_block, groups, Layout::NCHW);
  x = ops::group_norm(x, groups, e.conv_norm_out.weight, e.conv_norm_out.bias, kNormEps, /*silu=*/true);
  return conv(x, e.conv_out, 1, 1, Layout::NCHW);
}

// Decoder.forward in two parts: conv_in and the mid block at latent resolution ...
Tensor decoder_mid(const Tensor& z, const Vae::Decoder& d, int groups, Layout lay) {
  Tensor h = conv(z, d.conv_in, 1, 1, lay);
  return mid_block(h, d.mid_block, groups, lay);
}

// ... then the up blocks (channels in reversed order) and conv_norm_out + SiLU + conv_out, as steps.
std::vector<Vae::Step> decoder_up_steps(const Vae::Decoder& d, int groups, Layout lay) {
  std::vector<Vae::Step> steps;
  for (const auto& block : d.up_blocks) {
    for (const auto& r : block.resnets)
      steps.push_back([&r, groups, lay](const Tensor& h, const Vae::GroupNormFn& gn) {
        return resnet_block(h, r, groups, lay, gn);
      });
    if (block.upsampler.weight.defined())
      steps.push_back([&block, lay](const Tensor& h, const Vae::GroupNormFn&) { return upsample(h, block.upsampler, lay); });
  }
  steps.push_back([&d, groups, lay](const Tensor& h, const Vae::GroupNormFn& gn) {
    return conv(group_norm(h, d.conv_norm_out, groups, /*silu=*/true, lay, gn), d.conv_out, 1, 1, lay);
  });
  return steps;
}

// The untiled forward of a list of steps: each on the whole activation, in order.
Tensor run_steps(const Tensor& x, const std::vector<Vae::Step>& steps) {
  Tensor h = x;
  for (const Vae::Step& step : steps) h = step(h, {});
  return h;
}

// Loads weights by their diffusers names, moved to the compute device (a view of the mmap on the CPU), conv
// weights in the layout of the activations they meet (`lay`; NHWC: [O, kh, kw, I], permuted once here).
struct Loader {
  const Flux2Vae::WeightSource& src;
  Device device;
  Layout lay;
  Tensor t(const std::string& name) const { return src(name).to(device); }
  Vae::Conv conv(const std::string& p) const {
    const Tensor w = t(p + ".weight");
    return {lay == Layout::NHWC ? ops::conv_weight_nhwc(w) : w, t(p + ".bias")};
  }
  Vae::Norm norm(const std::string& p) const { return {t(p + ".weight"), t(p + ".bias")}; }
  Vae::Linear linear(const std::string& p) const { return {t(p + ".weight"), t(p + ".bias")}; }
  Vae::ResnetBlock2D resnet(const std::string& p, int in, int out) const {
    Vae::ResnetBlock2D r{norm(p + ".norm1"), norm(p + ".norm2"), conv(p + ".conv1"), conv(p + ".conv2"), {}};
    if (in != out) r.conv_shortcut = conv(p + ".conv_shortcut");
    return r;
  }
  Vae::MidBlock mid(const std::string& p, int ch, bool attn) const {
    Vae::MidBlock m;
    m.resnet0 = resnet(p + ".resnets.0", ch, ch);
    m.resnet1 = resnet(p + ".resnets.1", ch, ch);
    m.has_attention = attn;
    if (attn) {
      const std::string a = p + ".attentions.0";
      m.attention = {norm(a + ".group_norm"), linear(a + ".to_q"), linear(a + ".to_k"), linear(a + ".to_v"),
                     linear(a + ".to_out.0")};
    }
    return m;
  }
};

void check_image_tensor(const Tensor& x, const char* what, int64_t channels) {
  ERNIE_CHECK(x.defined(), "vae ", what, ": the input tensor is undefined");
  ERNIE_CHECK(x.ndim() == 4, "vae ", what, ": expected a [B, C, H, W] tensor, got ", shape_str(x.shape()));
  ERNIE_CHECK(x.dim(1) == channels, "vae ", what, ": expected ", I(channels), " channels, got ",
              shape_str(x.shape()));
  ERNIE_CHECK(x.dim(0) > 0 && x.dim(2) > 0 && x.dim(3) > 0, "vae ", what, ": empty input ", shape_str(x.shape()));
  ERNIE_CHECK(dtype_is_float(x.dtype()), "vae ", what, ": input dtype ", dtype_name(x.dtype()), " is not a float type");
}
}  // namespace

Flux2Vae Flux2Vae::load(const ModelFolder& m, Device device, DType act, ops::Layout decode_layout) {
  m.require_ok("vae");
  return build(m.vae, device, act, [&](const std::string& name) { return m.vae_c.tensor(name); }, m.vae_c.dir,
               decode_layout);
}

Flux2Vae Flux2Vae::build(const VaeConfig& cfg, Device device, DType act, const WeightSource& source,
                         const std::string& where, ops::Layout decode_layout) {
  ERNIE_CHECK(act == DType::F32 || act == DType::BF16 || act == DType::F16, "vae: activation dtype ",
              dtype_name(act), " is not supported (F32, BF16, F16)");
  ERNIE_CHECK(device.is_cuda() || act == DType::F32, "vae: the CPU computes in F32, not ", dtype_name(act));
  Flux2Vae v;
  v.cfg_ = cfg;
  v.device_ = device;
  v.act_ = act;
  v.decode_layout_ = decode_layout;
  const VaeConfig& c = v.cfg_;
  const Loader L{source, device, Layout::NCHW};  // the encoder (and quant_conv)
  const int nb = int(c.block_out_channels.size()), lp = c.layers_per_block;

  // Encoder: block i takes the previous block's channels (block 0 takes conv_in's) to block_out_channels[i].
  const std::vector<int>& enc = c.block_out_channels;
  v.encoder_.conv_in = L.conv("encoder.conv_in");
  int ch = enc[0];
  for (int b = 0; b < nb; ++b) {
    DownEncoderBlock2D block;
    for (int r = 0; r < lp; ++r) {
      block.resnets.push_back(L.resnet("encoder.down_blocks." + I(b) + ".resnets." + I(r), ch, enc[b]));
      ch = enc[b];
    }
    if (b + 1 < nb) block.downsampler = L.conv("encoder.down_blocks." + I(b) + ".downsamplers.0.conv");
    v.encoder_.down_blocks.push_back(std::move(block));
  }
  v.encoder_.mid_block = L.mid("encoder.mid_block", ch, c.mid_block_add_attention);
  v.encoder_.conv_norm_out = L.norm("encoder.conv_norm_out");
  v.encoder_.conv_out = L.conv("encoder.conv_out");
  if (c.use_quant_conv) v.quant_conv_ = L.conv("quant_conv");

  // Decoder (and post_quant_conv) in decode_layout: up blocks run over the channels in reversed order,
  // layers_per_block + 1 resnets each.
  const Loader D{source, device, decode_layout};
  if (c.use_post_quant_conv) v.post_quant_conv_ = D.conv("post_quant_conv");
  const std::vector<int> dec(c.decoder_channels().rbegin(), c.decoder_channels().rend());
  ch = dec[0];
  v.decoder_.conv_in = D.conv("decoder.conv_in");
  v.decoder_.mid_block = D.mid("decoder.mid_block", ch, c.mid_block_add_attention);
  for (int b = 0; b < nb; ++b) {
    UpDecoderBlock2D block;
    for (int r = 0; r < lp + 1; ++r) {
      block.resnets.push_back(D.resnet("decoder.up_blocks." + I(b) + ".resnets." + I(r), ch, dec[b]));
      ch = dec[b];
    }
    if (b + 1 < nb) block.upsampler = D.conv("decoder.up_blocks." + I(b) + ".upsamplers.0.conv");
    v.decoder_.up_blocks.push_back(std::move(block));
  }
  v.decoder_.conv_norm_out = D.norm("decoder.conv_norm_out");
  v.decoder_.conv_out = D.conv("decoder.conv_out");

  // The pipeline de-normalises with bn.running_mean and sqrt(bn.running_var + 1e-5) (fp32 here).
  v.bn_mean_ = source("bn.running_mean").to_vector();
  const std::vector<float> var = source("bn.running_var").to_vector();
  v.bn_std_.resize(var.size());
  for (size_t i = 0; i < var.size(); ++i) {
    ERNIE_CHECK(std::isfinite(var[i]) && var[i] >= 0 && std::isfinite(v.bn_mean_[i]), where,
                ": bn.running_var/running_mean[", I(int64_t(i)), "] is not a finite non-negative statistic");
    v.bn_std_[i] = std::sqrt(var[i] + kBnEps);
  }
  return v;
}

Tensor Flux2Vae::to_act(const Tensor& x) const {
  Tensor y = x.to(device_);
  return y.dtype() == act_ ? y : ops::cast(y, act_);
}

Tensor Flux2Vae::decode(const Tensor& z) const { return decode_image(run_steps(decode_mid(z), decode_up_steps())); }

Tensor Flux2Vae::decode_mid(const Tensor& z) const {
  check_image_tensor(z, "decode", cfg_.latent_channels);
  Tensor h = to_act(z);
  if (decode_layout_ == Layout::NHWC) h = ops::permute(h, {0, 2, 3, 1});  // the one conversion in
  if (post_quant_conv_.weight.defined()) h = conv(h, post_quant_conv_, 1, 0, decode_layout_);
  return decoder_mid(h, decoder_, cfg_.norm_num_groups, decode_layout_);
}

std::vector<Flux2Vae::Step> Flux2Vae::decode_up_steps() const {
  return decoder_up_steps(decoder_, cfg_.norm_num_groups, decode_layout_);
}

Tensor Flux2Vae::decode_image(const Tensor& h) const {
  return decode_layout_ == Layout::NHWC ? ops::permute(h, {0, 3, 1, 2}) : h;  // and the one out
}

std::pair<Tensor, Tensor> Flux2Vae::encode(const Tensor& image) const {
  check_image_tensor(image, "encode", cfg_.in_channels);
  const int s = cfg_.spatial_scale();
  ERNIE_CHECK(image.dim(2) % s == 0 && image.dim(3) % s == 0, "vae encode: image height and width must be "
              "multiples of ", I(s), ", got ", shape_str(image.shape()));
  return encode_mid(run_steps(to_act(image), encode_down_steps()));
}

std::vector<Flux2Vae::Step> Flux2Vae::encode_down_steps() const {
  return encoder_down_steps(encoder_, cfg_.norm_num_groups);
}

std::pair<Tensor, Tensor> Flux2Vae::encode_mid(const Tensor& x) const {
  check_image_tensor(x, "encode_mid", cfg_.block_out_channels.back());
  Tensor h = encoder_mid(to_act(x), encoder_, cfg_.norm_num_groups);
  if (quant_conv_.weight.defined()) h = conv(h, quant_conv_, 1, 0, Layout::NCHW);
  // DiagonalGaussianDistribution: chunk into mean and logvar along channels; logvar clamped to [-30, 20].
  const int64_t L = cfg_.latent_channels;
  Tensor mean = ops::slice(h, 1, 0, L);
  Tensor logvar = ops::clamp(ops::slice(h, 1, L, L), kLogvarMin, kLogvarMax);
  return {mean, logvar};
}

std::pair<Tensor, Tensor> Flux2Vae::affine_rows(int64_t batch, const std::vector<float>& shift,
                                                const std::vector<float>& scale_minus_1) const {
  const int64_t C = int64_t(shift.size());
  std::vector<float> sh(size_t(batch * C)), sc(size_t(batch * C));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < C; ++c) sh[size_t(b * C + c)] = shift[size_t(c)], sc[size_t(b * C + c)] = scale_minus_1[size_t(c)];
  return {to_act(Tensor::from_vector(sh, {batch, C})), to_act(Tensor::from_vector(sc, {batch, C}))};
}

// latents * bn_std + bn_mean per channel (as x * (1 + (std - 1)) + mean through ops::modulate, on the
// channels-last view), then the pipeline's _unpatchify_latents: channel c*4 + dy*2 + dx of pixel (i, j)
// goes to channel c at pixel (2i + dy, 2j + dx).
Tensor Flux2Vae::denormalize_and_unpatchify(const Tensor& latents) const {
  const int p = cfg_.patch_size[0];
  const int64_t L = cfg_.latent_channels, C = L * p * p;
  check_image_tensor(latents, "denormalize_and_unpatchify", C);
  const int64_t B = latents.dim(0), h = latents.dim(2), w = latents.dim(3);
  std::vector<float> std_minus_1(bn_std_.size());
  for (size_t i = 0; i < bn_std_.size(); ++i) std_minus_1[i] = bn_std_[i] - 1.0f;
  auto [shift, scale] = affine_rows(B, bn_mean_, std_minus_1);
  Tensor x = ops::permute(to_act(latents), {0, 2, 3, 1}).reshape({B, h * w, C});
  x = ops::modulate(x, shift, scale).reshape({B, h, w, L, p, p});
  return ops::permute(x, {0, 3, 1, 4, 2, 5}).reshape({B, L, h * p, w * p});
}

// The pipeline's _patchify_latents, then (z - bn_mean) / bn_std (as z * (1 + (1/std - 1)) - mean/std).
Tensor Flux2Vae::patchify_and_normalize(const Tensor& z) const {
  const int p = cfg_.patch_size[0];
  const int64_t L = cfg_.latent_channels, C = L * p * p;
  check_image_tensor(z, "patchify_and_normalize", L);
  ERNIE_CHECK(z.dim(2) % p == 0 && z.dim(3) % p == 0, "vae patchify_and_normalize: latent height and width must "
              "be multiples of the patch size ", I(p), ", got ", shape_str(z.shape()));
  const int64_t B = z.dim(0), h = z.dim(2) / p, w = z.dim(3) / p;
  std::vector<float> shift(bn_std_.size()), scale(bn_std_.size());
  for (size_t i = 0; i < bn_std_.size(); ++i) shift[i] = -bn_mean_[i] / bn_std_[i], scale[i] = 1.0f / bn_std_[i] - 1.0f;
  auto [sh, sc] = affine_rows(B, shift, scale);
  Tensor x = ops::permute(to_act(z).reshape({B, L, h, p, w, p}), {0, 2, 4, 1, 3, 5}).reshape({B, h * w, C});
  x = ops::modulate(x, sh, sc).reshape({B, h, w, C});
  return ops::permute(x, {0, 3, 1, 2});
}

}  // namespace ernie
