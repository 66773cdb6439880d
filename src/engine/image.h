// An 8-bit RGB image, what the engine returns and what img2img takes (engine/init_image.h).
#pragma once
#include <cstdint>
#include <vector>

namespace ernie {

struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;    // height * width * 3
  std::vector<uint8_t> alpha;  // height * width, or empty (opaque); read only from masks
};

}  // namespace ernie
