// Every image file format in one place: what reads images reads PNG, JPEG and WebP alike, known by their
// content (the signature), never by the file's name; what writes them picks the format by the output's
// extension (.jpg/.jpeg, .webp, else PNG) or by name (the server's output_format).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/image_limits.h"
#include "io/png.h"

namespace ernie {

enum class ImageFormat { Png, Jpeg, Webp };

constexpr int kDefaultImageQuality = 90;  // JPEG and WebP

// By the first bytes; none for anything else.
std::optional<ImageFormat> sniff_image_format(const uint8_t* data, size_t size);
// ".jpg"/".jpeg" -> Jpeg, ".webp" -> Webp (any case), anything else -> Png.
ImageFormat image_format_for_path(const std::string& path);
// "png", "jpeg", "webp" (and "jpg") -> the format; none for anything else.
std::optional<ImageFormat> image_format_named(const std::string& name);
const char* image_format_name(ImageFormat f);  // "png", "jpeg", "webp"
const char* image_mime_type(ImageFormat f);    // "image/png", ...

// PNG, JPEG or WebP bytes -> RGB (+ alpha, + text: PNG's chunks, or "parameters" from JPEG/WebP EXIF).
// Anything else, corrupt, truncated or over the size caps (io/image_limits.h) throws Error naming `what`.
// `max_pixels` lowers the cap (checked in the header, before anything is decoded).
PngImage decode_image(const std::vector<uint8_t>& bytes, const std::string& what = "image",
                      uint64_t max_pixels = kMaxImagePixels);
PngImage read_image(const std::string& path);

// `text` as png_metadata gives it: PNG keeps every pair as a chunk; JPEG and WebP keep "parameters" (the
// A1111 text) in EXIF UserComment. `quality` (1-100) is JPEG's and WebP's.
std::vector<uint8_t> encode_image(ImageFormat f, int width, int height, const std::vector<uint8_t>& rgb,
                                  const std::vector<std::pair<std::string, std::string>>& text = {},
                                  int quality = kDefaultImageQuality);
// The format of the path's extension, written atomically (core/atomic_file.h); throws Error naming the path.
void write_image(const std::string& path, int width, int height, const std::vector<uint8_t>& rgb,
                 const std::vector<std::pair<std::string, std::string>>& text = {},
                 int quality = kDefaultImageQuality, const std::vector<std::string>& inputs = {});

}  // namespace ernie
