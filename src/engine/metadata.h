// Generation parameters embedded in output images: an A1111-style `parameters` text chunk (read by most
// image viewers and UIs) and a JSON `ernie-image` chunk with every field, for tools.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"

namespace ernie {

struct ImageMeta {
  GenerateRequest request;           // resolved
  std::string revised_prompt;        // the prompt actually encoded (differs with the prompt enhancer)
  std::string model;                 // display name of the model
  std::optional<uint64_t> seed;      // this image's seed; none when the noise came from a file without one
  int batch_index = 0, batch_size = 1;
  bool vae_tiled = false;            // the VAE decoded in tiles (GenerateResult::vae_tiled)
  std::string dit_weights;           // "fp8" / "int8" when the DiT ran 8-bit weights (GenerateResult), else empty
  bool attention_fp8 = false;        // the DiT ran fp8 attention (GenerateResult)
};

// The metadata of image k of `res`: its seed is image_seed(seed, k, rng) (seed + k with the ernie generator,
// the batch's seed with torch's, engine/noise.h), or none when the noise came from a file that records no seed. Every front end writes its PNGs through this.
ImageMeta image_meta(const GenerateResult& res, int k, const std::string& model, std::optional<uint64_t> seed);

std::string engine_version();  // "ernie-image 0.1.0"
std::string a1111_parameters(const ImageMeta& m);
nlohmann::json meta_json(const ImageMeta& m);
// [("parameters", ...), ("ernie-image", json)] for write_png.
std::vector<std::pair<std::string, std::string>> png_metadata(const ImageMeta& m);
// The folder name, or model_index.json's _name_or_path when it has one.
std::string model_display_name(const std::string& model_dir);

}  // namespace ernie
