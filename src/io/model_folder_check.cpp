// ModelFolder::check: every tensor the configs imply against what the checkpoints hold, and the components
// against each other.
#include "io/model_folder.h"

#include <map>

#include "core/error.h"

namespace ernie {

namespace {
std::string I(int i) { return std::to_string(i); }

void check_component(const Component& c, std::vector<Problem>& out) {
  std::map<std::string, const TensorSpec*> want;
  for (const TensorSpec& s : c.specs) {
    // "@name" means: outside the language-model prefix (lm_head sits next to "model.").
    std::string full = s.name[0] == '@' ? c.root + s.name.substr(1) : c.stored_name(s.name);
    want[full] = &s;
    const TensorInfo* ti = c.ckpt.find(full);
    if (!ti) {
      if (s.required) out.push_back({c.name, "missing tensor '" + full + "' " + shape_str(s.shape)});
      continue;
    }
    if (const TensorInfo* sc = c.ckpt.find(full + "_scale")) {  // a quantized weight and its row scales
      want[full + "_scale"] = &s;
      if (sc->shape != Shape{s.shape.empty() ? 0 : s.shape[0]} || sc->dtype != DType::F32 ||
          (ti->dtype != DType::F8_E4M3 && ti->dtype != DType::I8))
        out.push_back({c.name, "quantized tensor '" + full + "' (" + dtype_name(ti->dtype) + ") has a malformed scale " +
                                   shape_str(sc->shape) + " " + dtype_name(sc->dtype)});
    }
    if (const TensorInfo* is = c.ckpt.find(full + "_input_scale")) {  // a static activation scale (fp8 only)
      want[full + "_input_scale"] = &s;
      if (shape_numel(is->shape) != 1 || is->dtype != DType::F32 || ti->dtype != DType::F8_E4M3 ||
          !want.count(full + "_scale"))
        out.push_back({c.name, "static activation scale '" + full + "_input_scale' " + shape_str(is->shape) + " " +
                                   dtype_name(is->dtype) + " must be one F32 value of an fp8 weight"});
    }
    const bool conv1x1 = c.conv_as_linear.count(s.name) && s.shape.size() == 2 &&
                         ti->shape == Shape{s.shape[0], s.shape[1], 1, 1};
    if (ti->shape != s.shape && !conv1x1)
      out.push_back({c.name, "tensor '" + full + "' has shape " + shape_str(ti->shape) + ", the config implies " +
                                 shape_str(s.shape) + " (" + ti->file + ")"});
    if (!dtype_is_float(ti->dtype) && s.name != "bn.num_batches_tracked" && !want.count(full + "_scale"))
      out.push_back({c.name, "tensor '" + full + "' has non-float dtype " + std::string(dtype_name(ti->dtype))});
  }
  size_t unexpected = 0;
  std::string names;
  for (const TensorInfo* ti : c.ckpt.tensors()) {
    if (want.count(ti->name) || ti->name.rfind(c.root, 0) != 0) continue;
    if (++unexpected <= 3) names += (unexpected > 1 ? ", '" : "'") + ti->name + "'";
  }
  if (unexpected)
    out.push_back({c.name, std::to_string(unexpected) + " unexpected tensor(s) ignored (" +
                               (unexpected <= 3 ? names : "e.g. " + names) + ")" +
                               (c.source.empty() ? "" : " in " + c.source),
                   false});
}
}  // namespace

std::vector<Problem> ModelFolder::check() const {
  std::vector<Problem> out;
  check_component(transformer_c, out);
  check_component(text_encoder_c, out);
  check_component(vae_c, out);
  if (pe_c) check_component(*pe_c, out);
  if (dit.in_channels != vae.latent_channels * vae.patch_size[0] * vae.patch_size[1])
    out.push_back({"transformer", "in_channels " + I(dit.in_channels) + " != 4 x vae latent_channels " +
                                      I(vae.latent_channels) + " (vae/config.json)"});
  if (dit.out_channels != dit.in_channels)
    out.push_back({"transformer", "out_channels " + I(dit.out_channels) + " != in_channels " + I(dit.in_channels)});
  if (dit.text_in_dim != text_encoder.hidden_size)
    out.push_back({"transformer", "text_in_dim " + I(dit.text_in_dim) + " != text encoder hidden_size " +
                                      I(text_encoder.hidden_size) + " (text_encoder/config.json)"});
  if (text_encoder.num_hidden_layers < 2)
    out.push_back({"text_encoder", "num_hidden_layers must be >= 2 (the pipeline takes hidden_states[-2])"});
  return out;
}

void ModelFolder::require_ok(const std::string& component) const {
  const Component* c = component == "transformer" ? &transformer_c : component == "text_encoder" ? &text_encoder_c
                       : component == "vae" ? &vae_c : nullptr;
  for (const Problem& p : check())
    if (p.fatal && p.component == component) {
      if (c && !c->source.empty()) fail(c->source, " (", component, "): ", p.message);
      fail(root, "/", component, ": ", p.message);
    }
}

}  // namespace ernie
