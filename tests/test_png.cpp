// PNG writer/reader: pixels and text chunks round-trip; damaged files give errors, not crashes.
#include <gtest/gtest.h>

#include <zlib.h>

#include <fstream>
#include <vector>

#include "core/error.h"
#include "golden.h"
#include "io/png.h"

using namespace ernie;

namespace {
std::vector<uint8_t> pattern(int w, int h) {
  std::vector<uint8_t> rgb(size_t(w) * h * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = uint8_t((i * 37 + i / 7) & 0xff);
  return rgb;
}
}  // namespace

TEST(Png, RoundTripPixelsAndText) {
  test::TempDir d;
  std::string path = d.str() + "/a.png";
  auto rgb = pattern(7, 5);
  std::string utf8 = "一只黑白相间的中华田园犬";
  write_png(path, 7, 5, rgb, {{"parameters", "a cat\nSteps: 4"}, {"ernie-image", "{\"prompt\": \"" + utf8 + "\"}"}});
  PngImage img = read_png(path);
  EXPECT_EQ(img.width, 7);
  EXPECT_EQ(img.height, 5);
  EXPECT_EQ(img.rgb, rgb);
  ASSERT_EQ(img.text.size(), 2u);
  EXPECT_EQ(img.text["parameters"], "a cat\nSteps: 4");
  EXPECT_EQ(img.text["ernie-image"], "{\"prompt\": \"" + utf8 + "\"}");  // UTF-8 survives (iTXt)
}

TEST(Png, EncodingIsDeterministic) {
  auto rgb = pattern(16, 16);
  EXPECT_EQ(encode_png(16, 16, rgb, {{"k", "v"}}), encode_png(16, 16, rgb, {{"k", "v"}}));
}

TEST(Png, RejectsBadArguments) {
  EXPECT_THROW(encode_png(4, 4, std::vector<uint8_t>(10)), Error);
  EXPECT_THROW(encode_png(0, 4, {}), Error);
  EXPECT_THROW(encode_png(1, 1, {0, 0, 0}, {{"", "v"}}), Error);
  EXPECT_THROW(encode_png(1, 1, {0, 0, 0}, {{std::string(80, 'k'), "v"}}), Error);
}

TEST(Png, WriteToMissingFolderFailsWithPath) {
  try {
    write_png("/nonexistent-dir/x.png", 1, 1, {1, 2, 3});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x.png"), std::string::npos) << e.what();
  }
}

TEST(Png, DamagedFilesGiveErrors) {
  auto bytes = encode_png(8, 8, pattern(8, 8), {{"parameters", "x"}});
  EXPECT_THROW(decode_png({1, 2, 3}), Error);
  for (size_t cut : {size_t(8), size_t(30), bytes.size() / 2, bytes.size() - 13}) {
    std::vector<uint8_t> b(bytes.begin(), bytes.begin() + long(cut));
    EXPECT_THROW(decode_png(b), Error) << "cut at " << cut;
  }
  std::vector<uint8_t> flipped = bytes;
  flipped[40] ^= 0x55;  // inside IHDR/IDAT: CRC mismatch
  EXPECT_THROW(decode_png(flipped), Error);
}

namespace {
// A PNG of `w`×`h` declared in its header, with one empty IDAT: enough for the reader to see the size.
std::vector<uint8_t> png_claiming(uint32_t w, uint32_t h) {
  auto be32 = [](std::vector<uint8_t>& v, uint32_t x) {
    for (int s = 24; s >= 0; s -= 8) v.push_back(uint8_t(x >> s));
  };
  auto chunk = [&](std::vector<uint8_t>& out, const char* type, const std::vector<uint8_t>& data) {
    be32(out, uint32_t(data.size()));
    std::vector<uint8_t> td(type, type + 4);
    td.insert(td.end(), data.begin(), data.end());
    out.insert(out.end(), td.begin(), td.end());
    be32(out, uint32_t(crc32(0, td.data(), uInt(td.size()))));
  };
  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'}, ihdr;
  be32(ihdr, w);
  be32(ihdr, h);
  for (uint8_t b : {8, 2, 0, 0, 0}) ihdr.push_back(b);
  chunk(out, "IHDR", ihdr);
  chunk(out, "IDAT", {0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01});
  chunk(out, "IEND", {});
  return out;
}
}  // namespace

// A 100-byte file must not make the reader allocate gigabytes (issue 21: PNG inputs come from clients).
TEST(Png, PixelCountIsCapped) {
  const std::string e = test::error_of([] { decode_png(png_claiming(32768, 32768)); });
  EXPECT_NE(e.find("64 megapixels"), std::string::npos) << e;
  EXPECT_NE(test::error_of([] { decode_png(png_claiming(8192, 8192)); }).find("corrupt PNG"), std::string::npos);
}

TEST(Png, ReadsRegularFilesOnly) {
  EXPECT_NE(test::error_of([] { read_png("/dev/zero"); }).find("not a regular file"), std::string::npos);
}
