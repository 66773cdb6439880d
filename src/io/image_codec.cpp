#include "io/image_codec.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/file.h"
#include "io/jpeg.h"
#include "io/webp.h"

namespace ernie {

std::optional<ImageFormat> sniff_image_format(const uint8_t* d, size_t n) {
  if (n >= 8 && std::memcmp(d, "\x89PNG\r\n\x1a\n", 8) == 0) return ImageFormat::Png;
  if (n >= 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff) return ImageFormat::Jpeg;
  if (n >= 12 && std::memcmp(d, "RIFF", 4) == 0 && std::memcmp(d + 8, "WEBP", 4) == 0) return ImageFormat::Webp;
  return std::nullopt;
}

ImageFormat image_format_for_path(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (ext == ".jpg" || ext == ".jpeg") return ImageFormat::Jpeg;
  if (ext == ".webp") return ImageFormat::Webp;
  return ImageFormat::Png;
}

std::optional<ImageFormat> image_format_named(const std::string& name) {
  if (name == "png") return ImageFormat::Png;
  if (name == "jpeg" || name == "jpg") return ImageFormat::Jpeg;
  if (name == "webp") return ImageFormat::Webp;
  return std::nullopt;
}

const char* image_format_name(ImageFormat f) {
  return f == ImageFormat::Jpeg ? "jpeg" : f == ImageFormat::Webp ? "webp" : "png";
}

const char* image_mime_type(ImageFormat f) {
  return f == ImageFormat::Jpeg ? "image/jpeg" : f == ImageFormat::Webp ? "image/webp" : "image/png";
}

PngImage decode_image(const std::vector<uint8_t>& bytes, const std::string& what, uint64_t max_pixels) {
  const auto f = sniff_image_format(bytes.data(), bytes.size());
  ERNIE_CHECK(f.has_value(), what, ": not a PNG, JPEG or WebP file");
  switch (*f) {
    case ImageFormat::Jpeg: return decode_jpeg(bytes, what, max_pixels);
    case ImageFormat::Webp: return decode_webp(bytes, what, max_pixels);
    case ImageFormat::Png: break;
  }
  if (bytes.size() >= 24 && std::memcmp(&bytes[12], "IHDR", 4) == 0) {  // the size, before libpng allocates
    auto be32 = [&](size_t i) { return uint64_t(bytes[i]) << 24 | uint64_t(bytes[i + 1]) << 16 | uint64_t(bytes[i + 2]) << 8 | bytes[i + 3]; };
    const uint64_t w = be32(16), h = be32(20);
    ERNIE_CHECK(image_size_ok(w, h, max_pixels), what, ": PNG: ", image_size_error(w, h, max_pixels));
  }
  return decode_png(bytes, what);
}

PngImage read_image(const std::string& path) {
  const std::string data = read_regular_file(path, size_t(1) << 30);
  return decode_image(std::vector<uint8_t>(data.begin(), data.end()), path);
}

std::vector<uint8_t> encode_image(ImageFormat f, int width, int height, const std::vector<uint8_t>& rgb,
                                  const std::vector<std::pair<std::string, std::string>>& text, int quality) {
  if (f == ImageFormat::Png) return encode_png(width, height, rgb, text);
  std::string parameters;
  for (const auto& [k, v] : text)
    if (k == "parameters") parameters = v;
  return f == ImageFormat::Jpeg ? encode_jpeg(width, height, rgb, parameters, quality)
                                : encode_webp(width, height, rgb, parameters, quality);
}

void write_image(const std::string& path, int width, int height, const std::vector<uint8_t>& rgb,
                 const std::vector<std::pair<std::string, std::string>>& text, int quality,
                 const std::vector<std::string>& inputs) {
  const std::vector<uint8_t> bytes = encode_image(image_format_for_path(path), width, height, rgb, text, quality);
  write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), inputs);
}

}  // namespace ernie
