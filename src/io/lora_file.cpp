// LoRA key styles -> DiT weights (lora_layout), and the factors read off the file (load_lora).
#include "io/lora_file.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "io/model_folder.h"

namespace ernie {
namespace {

enum class Role { Down, Up, Alpha };

// The tensor suffixes of a LoRA module, longest first (".lora_A.default.weight" before ".lora_A.weight").
struct Suffix {
  const char* text;
  Role role;
};
constexpr Suffix kSuffixes[] = {
    {".lora_A.default.weight", Role::Down}, {".lora_B.default.weight", Role::Up}, {".lora_A.weight", Role::Down},
    {".lora_B.weight", Role::Up},           {".lora_down.weight", Role::Down},    {".lora_up.weight", Role::Up},
    {".alpha", Role::Alpha},
};

// Adapter types that are not a plain low-rank pair: an error, never skipped. By a part of the tensor name, or
// by its end.
struct Unsupported {
  const char* text;
  const char* what;
};
constexpr Unsupported kUnsupportedParts[] = {
    {".hada_", "LoHa"}, {".lokr_", "LoKr"}, {".dora_scale", "DoRA"}, {".lora_magnitude_vector", "DoRA"},
    {".lora_mid.", "LoCon's mid (Tucker) tensor"},
};
constexpr Unsupported kUnsupportedEnds[] = {
    {".diff", "a full weight difference"}, {".diff_b", "a full bias difference"}, {".lora_A.bias", "a LoRA bias"},
    {".lora_B.bias", "a LoRA bias"},       {".lora_down.bias", "a LoRA bias"},      {".lora_up.bias", "a LoRA bias"},
};

// Module-name prefixes, longest first: what they say about the module and the style they come from.
enum class Space { Dit, DitUnderscored, TextEncoder };
struct Prefix {
  const char* text;
  Space space;
  const char* style;
};
constexpr Prefix kPrefixes[] = {
    {"base_model.model.transformer.", Space::Dit, "diffusers"},
    {"base_model.model.", Space::Dit, "diffusers"},
    {"model.diffusion_model.", Space::Dit, "ai-toolkit"},
    {"diffusion_model.", Space::Dit, "ai-toolkit"},
    {"transformer.", Space::Dit, "diffusers"},
    {"lora_unet_", Space::DitUnderscored, "kohya"},
    {"lora_transformer_", Space::DitUnderscored, "kohya"},
    {"text_encoders.", Space::TextEncoder, ""},
    {"text_encoder.", Space::TextEncoder, ""},
    {"lora_te1_", Space::TextEncoder, ""},
    {"lora_te2_", Space::TextEncoder, ""},
    {"lora_te_", Space::TextEncoder, ""},
    {"", Space::Dit, "diffsynth"},
};

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

// A weight's [out, in] from its stored shape: [out, in], or a 1x1 convolution's [out, in, 1, 1].
bool as_matrix(const Shape& s, int64_t& rows, int64_t& cols) {
  if (s.size() != 2 && !(s.size() == 4 && s[2] == 1 && s[3] == 1)) return false;
  rows = s[0], cols = s[1];
  return true;
}

// The trainer a key's prefix and suffix point to.
std::string style_of(const Prefix& prefix, const Suffix& suffix) {
  const std::string p = prefix.text, s = suffix.text;
  if (s.find(".default.") != std::string::npos) return "diffsynth";
  if (p == "transformer." && s.find("lora_A") == std::string::npos && s.find("lora_B") == std::string::npos)
    return "onetrainer";  // lora_down / lora_up under transformer.
  return prefix.style;
}

struct Parts {
  std::string down, up, alpha;
};

}  // namespace

LoraLayout lora_layout(const std::vector<TensorInfo>& tensors, const DitConfig& cfg, const std::string& what) {
  // The DiT's linear weights by module path, and the same paths with their dots as underscores (kohya).
  std::map<std::string, Shape> linears;
  std::map<std::string, std::string> underscored;
  for (const TensorSpec& s : dit_tensor_specs(cfg)) {
    int64_t r, c;
    if (!ends_with(s.name, ".weight") || !as_matrix(s.shape, r, c)) continue;
    const std::string module = s.name.substr(0, s.name.size() - 7);
    linears[module] = s.shape;
    std::string u = module;
    std::replace(u.begin(), u.end(), '.', '_');
    underscored[u] = module;
  }

  std::map<std::string, Parts> modules;  // by DiT module path
  std::map<std::string, const TensorInfo*> by_name;
  LoraLayout out;
  for (const TensorInfo& t : tensors) {
    by_name[t.name] = &t;
    auto unsupported = [&](const Unsupported& u) {
      fail(what, ": tensor ", t.name, " is ", u.what, ", which is not supported (only LoRA's down/up pairs are; "
           "LoKr, LoHa and DoRA adapters cannot be merged)");
    };
    for (const Unsupported& u : kUnsupportedParts)
      if (t.name.find(u.text) != std::string::npos) unsupported(u);
    for (const Unsupported& u : kUnsupportedEnds)
      if (ends_with(t.name, u.text)) unsupported(u);
    const Suffix* suffix = nullptr;
    for (const Suffix& s : kSuffixes)
      if (ends_with(t.name, s.text)) {
        suffix = &s;
        break;
      }
    ERNIE_CHECK(suffix, what, ": tensor ", t.name, " is not part of a LoRA (expected names ending in .lora_A.weight / "
                ".lora_B.weight, .lora_down.weight / .lora_up.weight, or .alpha)");
    const std::string key = t.name.substr(0, t.name.size() - std::string(suffix->text).size());
    const Prefix* prefix = nullptr;
    for (const Prefix& p : kPrefixes)
      if (starts_with(key, p.text)) {
        prefix = &p;
        break;
      }
    std::string module = key.substr(std::string(prefix->text).size());
    if (prefix->space == Space::TextEncoder) {
      if (suffix->role != Role::Alpha) out.skipped.push_back(t.name);
      continue;
    }
    if (prefix->space == Space::DitUnderscored) {
      auto it = underscored.find(module);
      ERNIE_CHECK(it != underscored.end(), what, ": tensor ", t.name, " adapts ", module,
                  ", which is not a linear layer of this DiT");
      module = it->second;
    }
    ERNIE_CHECK(linears.count(module), what, ": tensor ", t.name, " adapts ", module.empty() ? "(nothing)" : module,
                ", which is not a linear layer of this DiT (",
                std::to_string(cfg.num_layers), " layers: layers.N.self_attention.to_q/to_k/to_v/to_out.0, "
                "layers.N.mlp.gate_proj/up_proj/linear_fc2, and the global projections)");
    Parts& p = modules[module];
    std::string& slot = suffix->role == Role::Down ? p.down : suffix->role == Role::Up ? p.up : p.alpha;
    ERNIE_CHECK(slot.empty(), what, ": tensors ", slot, " and ", t.name, " are both the ",
                suffix->role == Role::Down ? "down (A)" : suffix->role == Role::Up ? "up (B)" : "alpha", " of ", module);
    slot = t.name;
    if (suffix->role != Role::Alpha && out.style.empty()) out.style = style_of(*prefix, *suffix);
  }

  for (const auto& [module, p] : modules) {
    ERNIE_CHECK(!p.down.empty() && !p.up.empty(), what, ": ", module, " has ", p.down.empty() ? "no down (A)" : "no up (B)",
                " tensor", p.down.empty() && p.up.empty() ? " (only an alpha)" : "");
    int64_t out_dim = 0, in_dim = 0, dr = 0, dc = 0, ur = 0, uc = 0;
    as_matrix(linears.at(module), out_dim, in_dim);
    const TensorInfo &down = *by_name.at(p.down), &up = *by_name.at(p.up);
    ERNIE_CHECK(as_matrix(down.shape, dr, dc) && as_matrix(up.shape, ur, uc), what, ": ", module,
                ": down ", shape_str(down.shape), " and up ", shape_str(up.shape), " must be matrices");
    ERNIE_CHECK(dr >= 1 && dc == in_dim && ur == out_dim && uc == dr, what, ": ", module, ": down ",
                shape_str(down.shape), " and up ", shape_str(up.shape), " do not fit the weight [",
                std::to_string(out_dim), ", ", std::to_string(in_dim), "] (expected down [rank, ",
                std::to_string(in_dim), "] and up [", std::to_string(out_dim), ", rank])");
    for (const TensorInfo* t : {&down, &up})
      ERNIE_CHECK(dtype_is_float(t->dtype), what, ": tensor ", t->name, " has non-float dtype ", dtype_name(t->dtype));
    if (!p.alpha.empty()) {
      const TensorInfo& a = *by_name.at(p.alpha);
      ERNIE_CHECK(shape_numel(a.shape) == 1 && a.shape.size() <= 1 && dtype_is_float(a.dtype), what, ": alpha ",
                  a.name, " must be one float, not ", dtype_name(a.dtype), " ", shape_str(a.shape));
    }
    out.modules.push_back({module + ".weight", p.down, p.up, p.alpha, dr});
  }
  ERNIE_CHECK(!out.modules.empty(), what, ": no LoRA module for the DiT in this file",
              out.skipped.empty() ? "" : " (it only adapts the text encoder, which is not supported)");
  return out;
}

LoraAdapter load_lora(const std::string& path, const DitConfig& cfg) {
  std::shared_ptr<TensorFile> f = open_tensor_file(path);
  const LoraLayout layout = lora_layout(f->tensors(), cfg, path);
  LoraAdapter a;
  a.path = path;
  a.style = layout.style;
  a.skipped = layout.skipped;
  auto read = [&](const std::string& name, const Shape& as) {
    Tensor t = f->tensor(name).to_f32().clone().reshape(as);  // a copy: the adapter outlives the mapping
    const float* v = t.f32();
    for (int64_t i = 0; i < t.numel(); ++i)
      ERNIE_CHECK(std::isfinite(v[i]), path, ": tensor ", name, " holds a non-finite value (", std::to_string(v[i]),
                  " at element ", std::to_string(i), ")");
    return t;
  };
  for (const LoraModule& m : layout.modules) {
    const TensorInfo &down = *f->find(m.down), &up = *f->find(m.up);
    LoraFactors x;
    x.rank = m.rank;
    x.down = read(m.down, {m.rank, down.shape[1]});
    x.up = read(m.up, {up.shape[0], m.rank});
    x.alpha = m.alpha.empty() ? float(m.rank) : read(m.alpha, {1}).f32()[0];
    ERNIE_CHECK(x.alpha >= 0, path, ": alpha ", m.alpha, " is negative (", std::to_string(x.alpha), ")");
    a.weights[m.target] = std::move(x);
  }
  return a;
}

}  // namespace ernie
