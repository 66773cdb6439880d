// Images in and out for the front ends: any PNG, JPEG or WebP read by its content (io/image_codec.h), and the
// engine's images written with their parameters (engine/metadata.h): PNG text chunks, or EXIF UserComment in
// JPEG and WebP, where AUTOMATIC1111 puts them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/image.h"
#include "engine/metadata.h"
#include "io/image_codec.h"

namespace ernie {

// A PNG, JPEG or WebP file -> RGB (alpha kept for masks); throws Error naming the path.
Image load_image(const std::string& path);
// The image in format `f`, carrying `meta`'s parameters. `quality` (1-100): JPEG's and WebP's.
std::vector<uint8_t> encode_image_with_meta(ImageFormat f, const Image& img, const ImageMeta& meta,
                                            int quality = kDefaultImageQuality);
// Written atomically in the format of the path's extension (.jpg/.jpeg, .webp, else PNG); never over one of
// `inputs` (core/atomic_file.h).
void save_image(const std::string& path, const Image& img, const ImageMeta& meta, int quality = kDefaultImageQuality,
                const std::vector<std::string>& inputs = {});

}  // namespace ernie
