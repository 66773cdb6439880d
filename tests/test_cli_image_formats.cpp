// `generate -o x.jpg / x.webp` (the A1111 parameters in EXIF UserComment), JPEG and WebP as -i and --mask (read by
// content, whatever the name), --quality, and a truncated JPEG input refused before any weight is loaded.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "cli.h"
#include "golden.h"
#include "io/image_codec.h"

using namespace ernie;
using test::run_cli;

namespace {

std::string tiny_gen(const std::string& extra) {
  return "generate --model '" + test::tiny_model() + "' -p 'a cat' -W 16 -H 16 --steps 2 --threads 1 --device cpu " +
         extra;
}

std::vector<uint8_t> bytes_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST(CliImageFormats, WritesJpegAndWebpWithParameters) {
  test::TempDir d;
  ASSERT_EQ(run_cli(tiny_gen("--seed 3 -o '" + d.str() + "/ref.png'")).status, 0);
  const std::string params = read_image(d.str() + "/ref.png").text.at("parameters");
  for (const auto& [name, format] : {std::pair{"a.jpg", ImageFormat::Jpeg}, std::pair{"a.webp", ImageFormat::Webp}}) {
    const std::string out = d.str() + "/" + name;
    auto r = run_cli(tiny_gen("--seed 3 -o '" + out + "'"));
    ASSERT_EQ(r.status, 0) << r.out;
    const auto b = bytes_of(out);
    EXPECT_EQ(sniff_image_format(b.data(), b.size()), format) << name;
    const PngImage img = decode_image(b, name);
    EXPECT_EQ(img.width, 16);
    EXPECT_EQ(img.text.at("parameters"), params) << name;
  }
  // --quality reaches the encoder: a lower quality is a smaller file
  ASSERT_EQ(run_cli(tiny_gen("--seed 3 --quality 5 -o '" + d.str() + "/low.jpg'")).status, 0);
  ASSERT_EQ(run_cli(tiny_gen("--seed 3 --quality 100 -o '" + d.str() + "/high.jpg'")).status, 0);
  EXPECT_LT(bytes_of(d.str() + "/low.jpg").size(), bytes_of(d.str() + "/high.jpg").size());
  auto bad = run_cli(tiny_gen("--quality 0 -o '" + d.str() + "/q.jpg'"));
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("--quality"), std::string::npos) << bad.out;
}

TEST(CliImageFormats, ReadsJpegAndWebpInputsByContent) {
  test::TempDir d;
  const std::vector<uint8_t> rgb = [] {
    std::vector<uint8_t> v(16 * 16 * 3);
    for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t(i / 3);
    return v;
  }();
  std::vector<uint8_t> mask_rgb(16 * 16 * 3, 0);
  std::fill(mask_rgb.begin(), mask_rgb.begin() + 16 * 8 * 3, 255);
  // The init image as PNG, JPEG and WebP; one JPEG is named .png (read by content). The decoded pixels of each,
  // written back as a PNG, must give the same image as that file does.
  write_image(d.str() + "/i.jpg", 16, 16, rgb, {}, 90);
  write_image(d.str() + "/i.webp", 16, 16, rgb, {}, 90);
  write_image(d.str() + "/m.webp", 16, 16, mask_rgb, {}, 100);
  std::filesystem::copy_file(d.str() + "/i.jpg", d.str() + "/jpeg-named.png");
  for (const char* in : {"i.jpg", "i.webp", "jpeg-named.png"}) {
    const PngImage decoded = read_image(d.str() + "/" + in);
    write_image(d.str() + "/as.png", 16, 16, decoded.rgb);
    const std::string mask = " --mask '" + d.str() + "/m.webp'";
    auto a = run_cli(tiny_gen("--seed 4 -i '" + d.str() + "/" + in + "'" + mask + " -o '" + d.str() + "/a.png'"));
    ASSERT_EQ(a.status, 0) << in << ": " << a.out;
    auto b = run_cli(tiny_gen("--seed 4 -i '" + d.str() + "/as.png'" + mask + " -o '" + d.str() + "/b.png'"));
    ASSERT_EQ(b.status, 0) << b.out;
    EXPECT_EQ(read_image(d.str() + "/a.png").rgb, read_image(d.str() + "/b.png").rgb) << in;
  }
  // A truncated JPEG: a clear error naming the flag, and no output.
  auto jpeg = bytes_of(d.str() + "/i.jpg");
  jpeg.resize(jpeg.size() / 2);
  std::ofstream(d.str() + "/cut.jpg", std::ios::binary).write(reinterpret_cast<const char*>(jpeg.data()), long(jpeg.size()));
  auto r = run_cli(tiny_gen("-i '" + d.str() + "/cut.jpg' -o '" + d.str() + "/c.png'"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--init-img"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("corrupt JPEG"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(d.str() + "/c.png"));
}
