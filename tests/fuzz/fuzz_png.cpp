// libFuzzer target: the PNG reader (io/png.h decode_png, libpng underneath) on arbitrary bytes: an Error or an
// image, never a crash, and never more memory than the pixel cap allows.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "io/png.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const ernie::PngImage img = ernie::decode_png(std::vector<uint8_t>(data, data + size), "fuzz");
    if (img.rgb.size() != size_t(img.width) * size_t(img.height) * 3) __builtin_trap();
  } catch (const ernie::Error&) {
  }
  return 0;
}
