#include "io/key_layouts.h"

#include <string_view>

namespace ernie {

// The LDM layout (BFL's flux2 autoencoder; diffusers' scripts/convert_flux2_to_diffusers.py maps it):
//   encoder.conv_in, encoder.down.{i}.block.{r}.{norm1,conv1,norm2,conv2,nin_shortcut}, encoder.down.{i}.downsample.conv,
//   {encoder,decoder}.mid.block_{1,2}, {encoder,decoder}.mid.attn_1.{norm,q,k,v,proj_out} (1x1 convolutions),
//   {encoder,decoder}.norm_out, {encoder,decoder}.conv_out, decoder.conv_in,
//   decoder.up.{nb-1-i}.block.{r} and decoder.up.{nb-1-i}.upsample.conv (the up index counts from the lowest
//   resolution in diffusers and from the highest in LDM), encoder.quant_conv, decoder.post_quant_conv, and the latent
//   BatchNorm's bn.running_mean / bn.running_var at the top level in both.

const char* vae_layout_name(VaeLayout l) { return l == VaeLayout::Ldm ? "ldm" : "diffusers"; }

namespace {
bool eat(std::string_view& s, std::string_view p) {
  if (s.substr(0, p.size()) != p) return false;
  s.remove_prefix(p.size());
  return true;
}
// A decimal index followed by '.', consumed.
bool index(std::string_view& s, int& out) {
  size_t n = 0;
  out = 0;
  while (n < s.size() && n < 4 && s[n] >= '0' && s[n] <= '9') out = out * 10 + (s[n++] - '0');
  if (n == 0 || n >= s.size() || s[n] != '.') return false;
  s.remove_prefix(n + 1);
  return true;
}
std::string resnet_rest(std::string_view rest) {
  std::string_view r = rest;
  if (eat(r, "conv_shortcut.")) return "nin_shortcut." + std::string(r);
  return std::string(rest);
}
std::string mid(std::string_view rest) {  // after "mid_block."
  int k;
  std::string_view r = rest;
  if (eat(r, "resnets.") && index(r, k)) return "mid.block_" + std::to_string(k + 1) + "." + resnet_rest(r);
  r = rest;
  if (eat(r, "attentions.0.")) {
    for (auto [from, to] : {std::pair{"group_norm.", "norm."}, {"to_q.", "q."}, {"to_k.", "k."}, {"to_v.", "v."},
                            {"to_out.0.", "proj_out."}}) {
      std::string_view t = r;
      if (eat(t, from)) return "mid.attn_1." + std::string(to) + std::string(t);
    }
  }
  return "mid_block." + std::string(rest);
}
}  // namespace

std::string ldm_vae_name(const std::string& name, int nb, bool bfl_quant) {
  std::string_view s = name;
  if (bfl_quant && eat(s, "quant_conv.")) return "encoder.quant_conv." + std::string(s);
  s = name;
  if (bfl_quant && eat(s, "post_quant_conv.")) return "decoder.post_quant_conv." + std::string(s);
  for (const char* side : {"encoder.", "decoder."}) {
    s = name;
    if (!eat(s, side)) continue;
    const std::string out = side;
    if (eat(s, "conv_norm_out.")) return out + "norm_out." + std::string(s);
    if (eat(s, "mid_block.")) return out + mid(s);
    int i, r;
    std::string_view t = s;
    if (eat(t, "down_blocks.") && index(t, i)) {
      std::string_view u = t;
      if (eat(u, "resnets.") && index(u, r))
        return out + "down." + std::to_string(i) + ".block." + std::to_string(r) + "." + resnet_rest(u);
      u = t;
      if (eat(u, "downsamplers.0.")) return out + "down." + std::to_string(i) + ".downsample." + std::string(u);
    }
    t = s;
    if (eat(t, "up_blocks.") && index(t, i) && i < nb) {
      const std::string j = std::to_string(nb - 1 - i);
      std::string_view u = t;
      if (eat(u, "resnets.") && index(u, r)) return out + "up." + j + ".block." + std::to_string(r) + "." + resnet_rest(u);
      u = t;
      if (eat(u, "upsamplers.0.")) return out + "up." + j + ".upsample." + std::string(u);
    }
    return name;
  }
  return name;
}

bool vae_attention_weight(const std::string& name) {
  std::string_view s = name;
  if (!eat(s, "encoder.") && !eat(s, "decoder.")) return false;
  if (!eat(s, "mid_block.attentions.0.")) return false;
  return s == "to_q.weight" || s == "to_k.weight" || s == "to_v.weight" || s == "to_out.0.weight";
}

}  // namespace ernie
