// The img2img/inpainting golden cases (tests/data/img2img, from the diffusers components with the semantics of
// engine/init_image.h): the request of case N, and its golden tensors. Shared by the CPU and CUDA tests.
#pragma once
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "golden_cases.h"
#include "io/png.h"
#include "io/safetensors.h"

namespace ernie::test {

inline std::string img2img_dir() { return data_dir() + "/img2img"; }
inline const SafeTensorsFile& img2img_golden() {
  static std::shared_ptr<SafeTensorsFile> g = SafeTensorsFile::open(img2img_dir() + "/golden_i2i.safetensors");
  return *g;
}
inline nlohmann::json img2img_case(int n) {
  std::ifstream f(img2img_dir() + "/golden_i2i.json");
  return nlohmann::json::parse(std::string(std::istreambuf_iterator<char>(f), {}))["cases"][size_t(n)];
}
inline Tensor img2img_tensor(int n, const std::string& what) {
  return img2img_golden().tensor("case." + std::to_string(n) + "." + what).clone();
}
inline Image png_image(const std::string& file) {
  PngImage p = read_png(img2img_dir() + "/" + file);
  return Image{p.width, p.height, std::move(p.rgb), std::move(p.alpha)};
}
constexpr int kImg2imgCases = 5;

// Case n as a request: its prompt, size, steps, cfg, strength, image and mask, and the golden noise.
inline GenerateRequest img2img_request(int n) {
  const nlohmann::json c = img2img_case(n);
  GenerateRequest r = request_of_case(c);
  r.strength = c["strength"].get<float>();
  r.init_image = png_image(c["input"].get<std::string>());
  if (!c["mask"].is_null()) r.mask = png_image(c["mask"].get<std::string>());
  r.init_latents = img2img_tensor(n, "noise");
  return r;
}

}  // namespace ernie::test
