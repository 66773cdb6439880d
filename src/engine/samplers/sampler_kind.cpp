#include "engine/samplers/sampler_kind.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace ernie {

SamplerKind parse_sampler(const std::string& name, const char* flag) {
  std::string s = name;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (s == "euler" || s == "flow_match_euler") return SamplerKind::Euler;
  if (s == "dpmpp_2m" || s == "dpm++2m" || s == "dpm++ 2m" || s == "dpmpp2m") return SamplerKind::DpmPP2M;
  if (s == "unipc" || s == "uni_pc") return SamplerKind::UniPC;
  fail(flag, " '", name.substr(0, 40), "' is not a sampler this engine has; choose one of ", kSamplerChoices);
}

const char* sampler_id(SamplerKind k) {
  switch (k) {
    case SamplerKind::DpmPP2M: return "dpmpp_2m";
    case SamplerKind::UniPC: return "unipc";
    default: return "euler";
  }
}

const char* sampler_a1111(SamplerKind k) {
  switch (k) {
    case SamplerKind::DpmPP2M: return "DPM++ 2M";
    case SamplerKind::UniPC: return "UniPC";
    default: return "Euler";
  }
}

}  // namespace ernie
