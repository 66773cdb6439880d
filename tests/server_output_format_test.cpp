// gpt-image-1's fields on the OpenAI routes (output_format, output_compression, background, moderation, quality),
// JPEG and WebP accepted as image and mask, and the response's re-encoding of the queue's PNG with its A1111
// parameters kept in EXIF.
#include <gtest/gtest.h>

#include "io/image_codec.h"
#include "server/api_error.h"
#include "server/form_data.h"
#include "server/request_parse.h"

namespace ernie::server {
namespace {

ApiError error_of(const std::string& body) {
  try {
    parse_generation_request(body);
  } catch (const ApiException& e) {
    return e.error;
  }
  ADD_FAILURE() << "no ApiException for " << body;
  return {};
}

std::vector<uint8_t> pattern(int w, int h) {
  std::vector<uint8_t> v(size_t(w) * size_t(h) * 3);
  for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t(i * 7 / 5);
  return v;
}

TEST(ServerOutputFormat, GptImageFields) {
  EXPECT_EQ(parse_generation_request(R"({"prompt": "x"})").output.format, ImageFormat::Png);
  const ParsedRequest p = parse_generation_request(
      R"({"prompt": "x", "output_format": "jpeg", "output_compression": 40, "quality": "high", "background": "opaque",
          "moderation": "low"})");
  EXPECT_EQ(p.output.format, ImageFormat::Jpeg);
  EXPECT_EQ(p.output.quality, 40);
  EXPECT_EQ(parse_generation_request(R"({"prompt": "x", "output_format": "webp", "background": "auto"})").output.format,
            ImageFormat::Webp);
  EXPECT_EQ(parse_generation_request(R"({"prompt": "x", "output_compression": 0})").output.quality, 1);
  EXPECT_EQ(parse_generation_request(R"({"prompt": "x", "output_format": "png"})").output.format, ImageFormat::Png);

  EXPECT_EQ(error_of(R"({"prompt": "x", "output_format": "gif"})").param, "output_format");
  EXPECT_EQ(error_of(R"({"prompt": "x", "output_format": "jpg"})").param, "output_format");
  EXPECT_EQ(error_of(R"({"prompt": "x", "output_format": 3})").param, "output_format");
  EXPECT_EQ(error_of(R"({"prompt": "x", "output_compression": 101})").param, "output_compression");
  EXPECT_EQ(error_of(R"({"prompt": "x", "output_compression": "high"})").param, "output_compression");
  const ApiError t = error_of(R"({"prompt": "x", "background": "transparent"})");
  EXPECT_EQ(t.param, "background");
  EXPECT_NE(t.message.find("not supported"), std::string::npos) << t.message;
  EXPECT_EQ(error_of(R"({"prompt": "x", "background": "green"})").param, "background");
  const ApiError u = error_of(R"({"prompt": "x", "output_format": "webp", "response_format": "url"})");
  EXPECT_EQ(u.param, "output_format");
  EXPECT_NE(u.message.find("b64_json only"), std::string::npos) << u.message;
}

TEST(ServerOutputFormat, EditFormTakesOutputCompressionAsANumber) {
  const std::string png(reinterpret_cast<const char*>(encode_png(16, 16, pattern(16, 16)).data()),
                        encode_png(16, 16, pattern(16, 16)).size());
  const ParsedRequest p = parse_edit_form({{"image", "a.png", "image/png", png}, {"prompt", "", "", "x"},
                                           {"output_format", "", "", "webp"}, {"output_compression", "", "", "70"}});
  EXPECT_EQ(p.output.format, ImageFormat::Webp);
  EXPECT_EQ(p.output.quality, 70);
}

TEST(ServerOutputFormat, JpegAndWebpImagesAndMasks) {
  const auto rgb = pattern(16, 16);
  for (const auto& bytes : {encode_image(ImageFormat::Jpeg, 16, 16, rgb), encode_image(ImageFormat::Webp, 16, 16, rgb)}) {
    const std::string b(bytes.begin(), bytes.end());
    const ParsedRequest p = parse_generation_request(R"({"prompt": "x", "image": ")" + base64_encode(b) +
                                                     R"(", "mask": ")" + base64_encode(b) + R"("})");
    ASSERT_TRUE(p.req.init_image && p.req.mask);
    EXPECT_EQ(p.req.init_image->width, 16);
    EXPECT_EQ(p.req.mask->height, 16);
    // cut short: a 400 naming the field
    const ApiError e = error_of(R"({"prompt": "x", "image": ")" + base64_encode(b.substr(0, b.size() / 2)) + R"("})");
    EXPECT_EQ(e.param, "image");
    EXPECT_EQ(e.code, "invalid_image");
    EXPECT_NE(e.message.find("corrupt"), std::string::npos) << e.message;
    // over the server's pixel cap, refused from the header
    ParseLimits lim;
    lim.max_image_pixels = 100;
    try {
      decode_image_field(b, "image", lim);
      ADD_FAILURE() << "no error";
    } catch (const ApiException& x) {
      EXPECT_NE(x.error.message.find("too large"), std::string::npos) << x.error.message;
    }
  }
}

TEST(ServerOutputFormat, EncodeOutputKeepsTheParameters) {
  const auto rgb = pattern(16, 16);
  const auto png = encode_png(16, 16, rgb, {{"parameters", "a cat\nSteps: 2, Seed: 9"}, {"ernie-image", "{}"}});
  const std::string png_s(png.begin(), png.end());
  EXPECT_EQ(encode_output(png_s, {}), png_s);
  for (ImageFormat f : {ImageFormat::Jpeg, ImageFormat::Webp}) {
    const std::string out = encode_output(png_s, {f, 90});
    const std::vector<uint8_t> b(out.begin(), out.end());
    EXPECT_EQ(sniff_image_format(b.data(), b.size()), f);
    const PngImage img = decode_image(b);
    EXPECT_EQ(img.width, 16);
    EXPECT_EQ(img.text.at("parameters"), "a cat\nSteps: 2, Seed: 9");
  }
  EXPECT_LT(encode_output(png_s, {ImageFormat::Jpeg, 10}).size(), encode_output(png_s, {ImageFormat::Jpeg, 100}).size());
}

}  // namespace
}  // namespace ernie::server
