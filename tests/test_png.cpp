// PNG writer/reader: pixels and text chunks round-trip; damaged files give errors, not crashes.
#include <gtest/gtest.h>

#include <zlib.h>

#include <fstream>
#include <functional>
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

TEST(Png, AlphaRoundTrips) {
  auto rgb = pattern(6, 3);
  std::vector<uint8_t> alpha(18);
  for (size_t i = 0; i < alpha.size(); ++i) alpha[i] = uint8_t(i * 14);
  PngImage img = decode_png(encode_png(6, 3, rgb, {}, alpha));
  EXPECT_EQ(img.rgb, rgb);
  EXPECT_EQ(img.alpha, alpha);
  EXPECT_TRUE(decode_png(encode_png(6, 3, rgb)).alpha.empty());
  EXPECT_THROW(encode_png(6, 3, rgb, {}, std::vector<uint8_t>(5)), Error);
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

namespace {
// Peak resident memory, in KiB, that running `f` added to this process: the kernel's high-water mark is reset
// first (/proc/self/clear_refs, "5"). -1 where that reset is not allowed.
long peak_rss_added_kib(const std::function<void()>& f) {
  auto status_kib = [](const std::string& key) {
    std::ifstream s("/proc/self/status");
    for (std::string line; std::getline(s, line);)
      if (line.rfind(key + ":", 0) == 0) return std::stol(line.substr(key.size() + 1));
    return -1L;
  };
  std::ofstream reset("/proc/self/clear_refs");
  if (!(reset << "5" << std::flush)) return -1;
  const long before = status_kib("VmRSS");
  f();
  return status_kib("VmHWM") - before;
}

// The 73-byte file libFuzzer found (issue 21): a 4x4 PNG whose tEXt chunk declares 2,097,152,016 bytes.
const std::vector<uint8_t> kHugeTextChunk = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00,
    0x04, 0x00, 0x00, 0x00, 0x04, 0x08, 0x02, 0x00, 0x00, 0x00, 0x26, 0x93, 0x09, 0x29, 0x7d, 0x00, 0x00, 0x10, 0x74,
    0x45, 0x58, 0x74, 0x70, 0x65, 0x74, 0x65, 0x72, 0x73, 0x00, 0x61, 0x20, 0x63, 0x97, 0x97, 0x97, 0x61, 0x74, 0xbd,
    0xde, 0xf9, 0x20, 0x00, 0x12, 0x00, 0x02, 0x18, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x44, 0x82};
}  // namespace

// libpng allocated and zeroed the declared 2 GB before finding the file ends (13 s, 2 GB resident); now the
// chunk lengths are checked first: a clear error, in next to no memory.
TEST(Png, ChunkDeclaringMoreBytesThanTheFileIsRefusedCheaply) {
  std::string e;
  const long added = peak_rss_added_kib([&] { e = test::error_of([] { decode_png(kHugeTextChunk, "x.png"); }); });
  EXPECT_NE(e.find("x.png: corrupt PNG (chunk 'tEXt' at byte 33 declares 2097152016 bytes of data, the file has 28 left)"),
            std::string::npos)
      << e;
  if (added < 0) GTEST_SKIP() << "cannot reset the peak RSS here (/proc/self/clear_refs)";
  EXPECT_LT(added, 64L << 10) << "KiB";
}

// The 43-byte variant the fuzz smoke run found next: the same chunk cut off 2 bytes into its data, so that even
// its CRC is missing. A chunk the file cannot hold whole, header and CRC included, is refused before libpng sees it.
TEST(Png, CutOffChunkIsRefusedCheaply) {
  const std::vector<uint8_t> cut(kHugeTextChunk.begin(), kHugeTextChunk.begin() + 43);
  std::string e;
  const long added = peak_rss_added_kib([&] { e = test::error_of([&] { decode_png(cut, "x.png"); }); });
  EXPECT_NE(e.find("x.png: corrupt PNG (the file ends inside the chunk at byte 33)"), std::string::npos) << e;
  if (added < 0) GTEST_SKIP() << "cannot reset the peak RSS here (/proc/self/clear_refs)";
  EXPECT_LT(added, 64L << 10) << "KiB";
}

// A chunk really there but larger than the 4 MiB libpng may buffer outside the image data is refused; text
// below that still reads.
TEST(Png, TextChunksAreBounded) {
  const std::string big(size_t(5) << 20, 'a'), ok(size_t(1) << 20, 'b');
  const std::string e = test::error_of([&] { decode_png(encode_png(2, 2, pattern(2, 2), {{"k", big}})); });
  EXPECT_NE(e.find("PNG chunk 'tEXt' holds 5242882 bytes (at most 4 MiB outside the image data)"), std::string::npos)
      << e;
  EXPECT_EQ(decode_png(encode_png(2, 2, pattern(2, 2), {{"k", ok}})).text["k"], ok);
}
