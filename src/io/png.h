// PNG out and in (libpng): 8-bit RGB (or RGBA) with text chunks. Text chunks carry the generation parameters
// (A1111-style `parameters` and a JSON `ernie-image` chunk); values that are not plain ASCII are written
// as uncompressed iTXt (UTF-8), the rest as tEXt.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ernie {

struct PngImage {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;                   // height * width * 3
  std::vector<uint8_t> alpha;                 // height * width when the file has alpha (or tRNS), else empty
  std::map<std::string, std::string> text;    // tEXt / iTXt / zTXt chunks, keyword -> value
};

// Encodes to PNG bytes in memory (RGB; RGBA when `alpha`, height * width bytes, is given). Keywords must be
// 1-79 Latin-1 characters (PNG rule); throws Error.
std::vector<uint8_t> encode_png(int width, int height, const std::vector<uint8_t>& rgb,
                                const std::vector<std::pair<std::string, std::string>>& text = {},
                                const std::vector<uint8_t>& alpha = {});
// Writes through core/atomic_file.h (refusing a target that is not a regular file or is one of `inputs`);
// throws Error naming the path.
void write_png(const std::string& path, int width, int height, const std::vector<uint8_t>& rgb,
               const std::vector<std::pair<std::string, std::string>>& text = {},
               const std::vector<std::string>& inputs = {});
// Reads any 8-bit or 16-bit PNG, converted to 8-bit RGB (alpha, when there is any, kept apart); throws Error
// naming the path.
PngImage read_png(const std::string& path);
PngImage decode_png(const std::vector<uint8_t>& bytes, const std::string& what = "png");

}  // namespace ernie
