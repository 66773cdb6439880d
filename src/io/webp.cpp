#include "io/webp.h"

#include <algorithm>
#include <memory>

#include <webp/decode.h>
#include <webp/demux.h>
#include <webp/encode.h>
#include <webp/mux.h>

#include "core/error.h"
#include "io/exif.h"
#include "io/image_limits.h"

namespace ernie {
namespace {

const char* status_text(VP8StatusCode s) {
  switch (s) {
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "truncated data";
    default: return "decoding failed";
  }
}

struct MuxDeleter {
  void operator()(WebPMux* m) const { WebPMuxDelete(m); }
};
struct DemuxDeleter {
  void operator()(WebPDemuxer* d) const { WebPDemuxDelete(d); }
};
struct WebPBytes {  // memory libwebp allocated
  uint8_t* p = nullptr;
  ~WebPBytes() { WebPFree(p); }
};

}  // namespace

std::vector<uint8_t> encode_webp(int width, int height, const std::vector<uint8_t>& rgb, const std::string& parameters,
                                 int quality) {
  ERNIE_CHECK(width > 0 && height > 0 && width <= WEBP_MAX_DIMENSION && height <= WEBP_MAX_DIMENSION,
              "webp: image size ", std::to_string(width), "x", std::to_string(height), " out of range (at most ",
              std::to_string(WEBP_MAX_DIMENSION), " a side)");
  ERNIE_CHECK(rgb.size() == size_t(width) * size_t(height) * 3, "webp: pixel buffer holds ", std::to_string(rgb.size()),
              " bytes, expected ", std::to_string(size_t(width) * height * 3));
  ERNIE_CHECK(quality >= 1 && quality <= 100, "webp: quality ", std::to_string(quality), " out of range 1-100");
  WebPBytes image;
  const size_t n = WebPEncodeRGB(rgb.data(), width, height, width * 3, float(quality), &image.p);
  ERNIE_CHECK(n > 0, "webp: encoding failed");
  if (parameters.empty()) return std::vector<uint8_t>(image.p, image.p + n);
  std::unique_ptr<WebPMux, MuxDeleter> mux(WebPMuxNew());
  ERNIE_CHECK(mux != nullptr, "webp: out of memory");
  const std::vector<uint8_t> exif = exif_with_user_comment(parameters);
  const WebPData bitstream{image.p, n}, exif_data{exif.data(), exif.size()};
  WebPData assembled{nullptr, 0};
  ERNIE_CHECK(WebPMuxSetImage(mux.get(), &bitstream, 1) == WEBP_MUX_OK &&
                  WebPMuxSetChunk(mux.get(), "EXIF", &exif_data, 1) == WEBP_MUX_OK &&
                  WebPMuxAssemble(mux.get(), &assembled) == WEBP_MUX_OK,
              "webp: adding the EXIF chunk failed");
  std::vector<uint8_t> out(assembled.bytes, assembled.bytes + assembled.size);
  WebPDataClear(&assembled);
  return out;
}

PngImage decode_webp(const std::vector<uint8_t>& bytes, const std::string& what, uint64_t max_pixels) {
  ERNIE_CHECK(bytes.size() >= 12 && std::equal(bytes.begin(), bytes.begin() + 4, "RIFF") &&
                  std::equal(bytes.begin() + 8, bytes.begin() + 12, "WEBP"),
              what, ": not a WebP file");
  WebPBitstreamFeatures f;
  const VP8StatusCode s = WebPGetFeatures(bytes.data(), bytes.size(), &f);
  ERNIE_CHECK(s == VP8_STATUS_OK, what, ": corrupt WebP (", status_text(s), ")");
  ERNIE_CHECK(!f.has_animation, what, ": animated WebP is not supported (give one still image)");
  ERNIE_CHECK(image_size_ok(uint64_t(f.width), uint64_t(f.height), max_pixels), what, ": WebP: ",
              image_size_error(uint64_t(f.width), uint64_t(f.height), max_pixels));
  const size_t n = size_t(f.width) * size_t(f.height);
  std::vector<uint8_t> rgba(n * 4);
  ERNIE_CHECK(WebPDecodeRGBAInto(bytes.data(), bytes.size(), rgba.data(), rgba.size(), f.width * 4) != nullptr, what,
              ": corrupt or truncated WebP (the image data does not decode)");
  PngImage img;
  img.width = f.width;
  img.height = f.height;
  img.rgb.resize(n * 3);
  if (f.has_alpha) img.alpha.resize(n);
  for (size_t i = 0; i < n; ++i) {
    for (int c = 0; c < 3; ++c) img.rgb[i * 3 + size_t(c)] = rgba[i * 4 + size_t(c)];
    if (f.has_alpha) img.alpha[i] = rgba[i * 4 + 3];
  }
  const WebPData data{bytes.data(), bytes.size()};
  std::unique_ptr<WebPDemuxer, DemuxDeleter> demux(WebPDemux(&data));
  WebPChunkIterator it;
  if (demux && WebPDemuxGetChunk(demux.get(), "EXIF", 1, &it)) {
    if (auto comment = exif_user_comment(it.chunk.bytes, it.chunk.size)) img.text["parameters"] = *comment;
    WebPDemuxReleaseChunkIterator(&it);
  }
  return img;
}

}  // namespace ernie
