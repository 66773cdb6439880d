// The size caps every image reader applies (PNG, JPEG, WebP), checked in the header before any pixel is
// allocated: a small file cannot ask for more than 64 megapixels (256 MiB as RGBA) or a lower cap its caller sets
// (the server's max_image_pixels).
#pragma once
#include <cstdint>
#include <string>

namespace ernie {

constexpr uint32_t kMaxImageSide = 1u << 15;             // pixels a side
constexpr uint64_t kMaxImagePixels = uint64_t(1) << 26;  // 64 MP decoded

inline bool image_size_ok(uint64_t w, uint64_t h, uint64_t max_pixels) {
  return w > 0 && h > 0 && w <= kMaxImageSide && h <= kMaxImageSide && w * h <= max_pixels;
}
// "a WxH image is too large (at most 32768 pixels a side and N pixels)"
inline std::string image_size_error(uint64_t w, uint64_t h, uint64_t max_pixels) {
  return "a " + std::to_string(w) + "x" + std::to_string(h) + " image is " + (w == 0 || h == 0 ? "empty" : "too large") +
         " (at most " + std::to_string(kMaxImageSide) + " pixels a side and " + std::to_string(max_pixels) + " pixels)";
}

}  // namespace ernie
