// libFuzzer target: the JPEG and WebP readers (io/jpeg.h, io/webp.h through io/image_codec.h decode_image, with the
// EXIF UserComment parser of io/exif.h) on arbitrary bytes: an Error or an image, never a crash, never more memory
// than the pixel cap allows. Bytes that sniff as neither are read both ways.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "io/exif.h"
#include "io/image_codec.h"
#include "io/jpeg.h"
#include "io/webp.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<uint8_t> bytes(data, data + size);
  (void)ernie::exif_user_comment(data, size);
  for (auto decode : {ernie::decode_jpeg, ernie::decode_webp}) {
    try {
      const ernie::PngImage img = decode(bytes, "fuzz", ernie::kMaxImagePixels);
      if (img.rgb.size() != size_t(img.width) * size_t(img.height) * 3) __builtin_trap();
      if (!img.alpha.empty() && img.alpha.size() != size_t(img.width) * size_t(img.height)) __builtin_trap();
    } catch (const ernie::Error&) {
    }
  }
  return 0;
}
