// WebP out and in (libwebp, its mux and demux): lossy 8-bit RGB out, the generation parameters in an EXIF chunk
// (UserComment, io/exif.h, as AUTOMATIC1111 writes them); in: still images, RGB with alpha kept apart, the PNG size
// caps (io/image_limits.h) applied to the header, truncated or corrupt data and animations refused.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/image_limits.h"
#include "io/png.h"

namespace ernie {

// `parameters`: the UserComment (no EXIF chunk when empty). quality 1-100. Throws Error.
std::vector<uint8_t> encode_webp(int width, int height, const std::vector<uint8_t>& rgb, const std::string& parameters,
                                 int quality);
// text["parameters"] from the EXIF chunk's UserComment when there is one. Throws Error naming `what`.
PngImage decode_webp(const std::vector<uint8_t>& bytes, const std::string& what = "webp",
                     uint64_t max_pixels = kMaxImagePixels);

}  // namespace ernie
