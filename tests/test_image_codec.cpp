// JPEG and WebP in and out (io/jpeg.h, io/webp.h, io/image_codec.h): round trips with the A1111 parameters read
// back from EXIF UserComment, the format picked by content when reading and by extension when writing, and bad
// files (truncated, corrupt, too large, a progressive scan bomb) refused with a clear error.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <jpeglib.h>

#include "engine/image_files.h"
#include "golden.h"
#include "io/exif.h"
#include "io/image_codec.h"
#include "io/jpeg.h"
#include "io/webp.h"

using namespace ernie;

namespace {

const std::string kParams = "a cat \xe2\x98\x95 on a mat \xf0\x9f\x90\x88\nNegative prompt: blurry\nSteps: 4, Seed: 7";

// A smooth pattern, so lossy codecs stay close to it.
std::vector<uint8_t> gradient(int w, int h) {
  std::vector<uint8_t> v(size_t(w) * size_t(h) * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) v[(size_t(y) * size_t(w) + size_t(x)) * 3 + size_t(c)] = uint8_t(x * 150 / w + y * 80 / h + c * 10);
  return v;
}

double mean_abs_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += std::abs(int(a[i]) - int(b[i]));
  return s / double(a.size());
}

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST(ImageCodec, JpegRoundTripKeepsParametersInExif) {
  const auto rgb = gradient(40, 24);
  const auto bytes = encode_jpeg(40, 24, rgb, kParams, 95);
  EXPECT_EQ(sniff_image_format(bytes.data(), bytes.size()), ImageFormat::Jpeg);
  const PngImage img = decode_image(bytes, "a.jpg");
  EXPECT_EQ(img.width, 40);
  EXPECT_EQ(img.height, 24);
  EXPECT_TRUE(img.alpha.empty());
  EXPECT_LT(mean_abs_diff(img.rgb, rgb), 4.0);
  ASSERT_TRUE(img.text.count("parameters"));
  EXPECT_EQ(img.text.at("parameters"), kParams);
  EXPECT_TRUE(decode_jpeg(encode_jpeg(40, 24, rgb, "", 90)).text.empty());  // no parameters: no EXIF
  // Lower quality: a smaller file.
  EXPECT_LT(encode_jpeg(40, 24, rgb, "", 20).size(), encode_jpeg(40, 24, rgb, "", 100).size());
}

TEST(ImageCodec, WebpRoundTripKeepsParametersInExif) {
  const auto rgb = gradient(40, 24);
  const auto bytes = encode_webp(40, 24, rgb, kParams, 95);
  EXPECT_EQ(sniff_image_format(bytes.data(), bytes.size()), ImageFormat::Webp);
  const PngImage img = decode_image(bytes, "a.webp");
  EXPECT_EQ(img.width, 40);
  EXPECT_EQ(img.height, 24);
  EXPECT_LT(mean_abs_diff(img.rgb, rgb), 4.0);
  ASSERT_TRUE(img.text.count("parameters"));
  EXPECT_EQ(img.text.at("parameters"), kParams);
  EXPECT_TRUE(decode_webp(encode_webp(40, 24, rgb, "", 90)).text.empty());
  EXPECT_LT(encode_webp(40, 24, rgb, "", 10).size(), encode_webp(40, 24, rgb, "", 100).size());
}

TEST(ImageCodec, ExifUserCommentIsPiexifsLayout) {
  // "UNICODE\0" then UTF-16BE in a big-endian TIFF block: what piexif.helper.UserComment.dump(..., "unicode") makes.
  const auto b = exif_with_user_comment("A\xc3\xa9");
  ASSERT_GE(b.size(), 8u + 2 + 12 + 4 + 2 + 12 + 4 + 8 + 4);
  EXPECT_EQ(std::string(b.begin(), b.begin() + 4), std::string("MM\0*", 4));
  const std::string tail(b.end() - 12, b.end());
  EXPECT_EQ(tail, std::string("UNICODE\0\0A\0\xe9", 12));
  EXPECT_EQ(exif_user_comment(b.data(), b.size()), "A\xc3\xa9");
  // A little-endian block with an ASCII comment, as cameras write, and the "Exif\0\0" prefix of a JPEG segment.
  std::vector<uint8_t> le = {'E', 'x', 'i', 'f', 0, 0, 'I', 'I', 42, 0, 8, 0, 0, 0,
                             1, 0, 0x69, 0x87, 4, 0, 1, 0, 0, 0, 26, 0, 0, 0, 0, 0, 0, 0,
                             1, 0, 0x86, 0x92, 7, 0, 10, 0, 0, 0, 44, 0, 0, 0, 0, 0, 0, 0,
                             'A', 'S', 'C', 'I', 'I', 0, 0, 0, 'h', 'i'};
  EXPECT_EQ(exif_user_comment(le.data(), le.size()), "hi");
  // Every truncation and every single-byte change: none, or a string, never a read out of bounds (ASan).
  for (size_t n = 0; n < b.size(); ++n) (void)exif_user_comment(b.data(), n);
  for (size_t i = 0; i < le.size(); ++i) {
    auto m = le;
    m[i] ^= 0xff;
    (void)exif_user_comment(m.data(), m.size());
  }
  EXPECT_EQ(exif_user_comment(le.data(), 40), std::nullopt);
}

TEST(ImageCodec, WritesByExtensionReadsByContent) {
  test::TempDir d;
  const auto rgb = gradient(16, 16);
  const std::vector<std::pair<std::string, std::string>> text = {{"parameters", kParams}, {"ernie-image", "{}"}};
  for (const char* name : {"a.jpg", "b.JPEG", "c.webp", "d.png", "e.out"}) {
    const std::string path = d.str() + "/" + name;
    write_image(path, 16, 16, rgb, text, 90);
    const auto bytes = file_bytes(path);
    const auto f = sniff_image_format(bytes.data(), bytes.size());
    ASSERT_TRUE(f.has_value()) << name;
    EXPECT_EQ(*f, image_format_for_path(path)) << name;
    const PngImage img = read_image(path);
    EXPECT_EQ(img.text.at("parameters"), kParams) << name;
    EXPECT_EQ(img.text.count("ernie-image"), *f == ImageFormat::Png ? 1u : 0u) << name;
  }
  EXPECT_EQ(image_format_for_path("x.jpg"), ImageFormat::Jpeg);
  EXPECT_EQ(image_format_for_path("x.WebP"), ImageFormat::Webp);
  EXPECT_EQ(image_format_for_path("x"), ImageFormat::Png);
  // A JPEG named .png is still read as the JPEG it is.
  const std::string misnamed = d.str() + "/really-a-jpeg.png";
  std::ofstream(misnamed, std::ios::binary) << std::string(reinterpret_cast<const char*>(encode_jpeg(16, 16, rgb, "x", 90).data()),
                                                           encode_jpeg(16, 16, rgb, "x", 90).size());
  EXPECT_EQ(load_image(misnamed).width, 16);
  EXPECT_EQ(image_format_named("webp"), ImageFormat::Webp);
  EXPECT_EQ(image_format_named("gif"), std::nullopt);
}

TEST(ImageCodec, RefusesOtherFormats) {
  const std::string gif = "GIF89a\x10\x00\x10\x00";
  test::expect_error([&] { decode_image(std::vector<uint8_t>(gif.begin(), gif.end()), "x.gif"); },
                     "x.gif: not a PNG, JPEG or WebP file");
  test::expect_error([] { decode_image({}, "empty"); }, "not a PNG, JPEG or WebP");
}

TEST(ImageCodec, TruncatedAndCorruptJpegAreErrors) {
  const auto rgb = gradient(32, 32);
  const auto bytes = encode_jpeg(32, 32, rgb, kParams, 90);
  // (a file missing only its 2-byte EOI marker holds every pixel, and is read)
  for (size_t cut : {size_t(3), size_t(20), bytes.size() / 2, bytes.size() - 40}) {
    const std::vector<uint8_t> b(bytes.begin(), bytes.begin() + long(cut));
    test::expect_error([&] { decode_image(b, "t.jpg"); }, "t.jpg: corrupt JPEG");
  }
  // Garbage between markers (libjpeg's warning is an error here). Flipped entropy-coded bytes may decode to
  // other pixels without a sign: JPEG has no checksum.
  auto garbage = bytes;  // a stray byte after the first segment (APP1, the EXIF)
  garbage.insert(garbage.begin() + 4 + (size_t(bytes[4]) << 8 | bytes[5]), 0x00);
  test::expect_error([&] { decode_image(garbage, "f.jpg"); }, "f.jpg: corrupt JPEG");
}

TEST(ImageCodec, TruncatedAndCorruptWebpAreErrors) {
  const auto rgb = gradient(32, 32);
  for (const auto& bytes : {encode_webp(32, 32, rgb, "", 90), encode_webp(32, 32, rgb, kParams, 90)}) {
    for (size_t cut : {size_t(12), size_t(30), bytes.size() / 2, bytes.size() - 4}) {
      const std::vector<uint8_t> b(bytes.begin(), bytes.begin() + long(cut));
      test::expect_error([&] { decode_image(b, "t.webp"); }, "t.webp: corrupt");
    }
  }
}

// A small file must not make the reader allocate more than the caps allow: the size is checked in the header.
TEST(ImageCodec, SizeCapsApplyBeforeDecoding) {
  const auto rgb = gradient(16, 16);
  auto jpeg = encode_jpeg(16, 16, rgb, "", 90);
  // The baseline SOF0 segment: FF C0, length, precision, height (2 bytes), width (2 bytes).
  size_t sof = 0;
  for (size_t i = 2; i + 9 < jpeg.size(); ++i)
    if (jpeg[i] == 0xff && jpeg[i + 1] == 0xc0) {
      sof = i;
      break;
    }
  ASSERT_GT(sof, 0u);
  for (size_t k : {5, 6, 7, 8}) jpeg[sof + k] = 0xfd;  // 65021 x 65021
  test::expect_error([&] { decode_image(jpeg, "bomb.jpg"); }, "bomb.jpg: JPEG: a 65021x65021 image is too large");
  // WebP (lossy, simple format): the VP8 frame header's 14-bit sizes at 26 and 28.
  auto webp = encode_webp(16, 16, rgb, "", 90);
  ASSERT_EQ(std::string(webp.begin() + 12, webp.begin() + 16), "VP8 ");
  webp[26] = webp[28] = 0xff;
  webp[27] = webp[29] = 0x3f;  // 16383 x 16383: 268 megapixels
  test::expect_error([&] { decode_image(webp, "bomb.webp"); }, "bomb.webp: WebP: a 16383x16383 image is too large");
  // A caller's lower cap (the server's max_image_pixels) holds for every format.
  const auto small = encode_png(16, 16, rgb);
  for (const auto& b : {encode_jpeg(16, 16, rgb, "", 90), encode_webp(16, 16, rgb, "", 90), small})
    test::expect_error([&] { decode_image(b, "cap", 255); }, "a 16x16 image is too large");
  EXPECT_EQ(decode_image(small, "cap", 256).width, 16);
}

// A progressive JPEG may legally hold thousands of scans, each a full pass over the coefficients: more than 1000
// is refused.
TEST(ImageCodec, ProgressiveScanBombIsRefused) {
  const int w = 8, h = 8;
  const auto rgb = gradient(w, h);
  auto progressive = [&](bool bomb) {
    std::vector<jpeg_scan_info> scans;
    scans.push_back({3, {0, 1, 2, 0}, 0, 0, 0, 0});  // DC of all three components
    for (int c = 0; c < 3; ++c)
      for (int k = 1; k < 64; ++k) {
        const int top = bomb ? 10 : 0;  // each AC coefficient alone, refined bit by bit from bit 10
        scans.push_back({1, {c, 0, 0, 0}, k, k, 0, top});
        for (int al = top - 1; al >= 0; --al) scans.push_back({1, {c, 0, 0, 0}, k, k, al + 1, al});
      }
    jpeg_compress_struct c;
    jpeg_error_mgr err;
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    unsigned char* out = nullptr;
    unsigned long size = 0;
    jpeg_mem_dest(&c, &out, &size);
    c.image_width = w;
    c.image_height = h;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    c.scan_info = scans.data();
    c.num_scans = int(scans.size());
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
      JSAMPROW row = const_cast<JSAMPROW>(rgb.data() + size_t(c.next_scanline) * w * 3);
      jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    std::vector<uint8_t> v(out, out + size);
    std::free(out);
    return std::make_pair(v, scans.size());
  };
  const auto [fine, fine_scans] = progressive(false);
  EXPECT_EQ(fine_scans, 1u + 3 * 63);
  EXPECT_EQ(decode_image(fine, "p.jpg").width, w);
  const auto [bomb, bomb_scans] = progressive(true);
  EXPECT_GT(bomb_scans, 1000u);
  test::expect_error([&b = bomb] { decode_image(b, "bomb.jpg"); }, "more than 1000 scans");
}
