// JPEG out and in (libjpeg-turbo): 8-bit RGB, the generation parameters in EXIF UserComment (io/exif.h), as
// AUTOMATIC1111 writes them. Reading applies the PNG size caps (io/image_limits.h) in the header, refuses
// truncated or corrupt data (libjpeg's warnings are errors here) and progressive files of more than 1000 scans.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/image_limits.h"
#include "io/png.h"

namespace ernie {

// `parameters`: the UserComment (none when empty). quality 1-100. Throws Error.
std::vector<uint8_t> encode_jpeg(int width, int height, const std::vector<uint8_t>& rgb, const std::string& parameters,
                                 int quality);
// The pixels as RGB; text["parameters"] from the EXIF UserComment when there is one. Throws Error naming `what`.
PngImage decode_jpeg(const std::vector<uint8_t>& bytes, const std::string& what = "jpeg",
                     uint64_t max_pixels = kMaxImagePixels);

}  // namespace ernie
