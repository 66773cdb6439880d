#include "engine/image_files.h"

namespace ernie {

Image load_image(const std::string& path) {
  PngImage p = read_image(path);
  return Image{p.width, p.height, std::move(p.rgb), std::move(p.alpha)};
}

std::vector<uint8_t> encode_image_with_meta(ImageFormat f, const Image& img, const ImageMeta& meta, int quality) {
  return encode_image(f, img.width, img.height, img.rgb, png_metadata(meta), quality);
}

void save_image(const std::string& path, const Image& img, const ImageMeta& meta, int quality,
                const std::vector<std::string>& inputs) {
  write_image(path, img.width, img.height, img.rgb, png_metadata(meta), quality, inputs);
}

}  // namespace ernie
