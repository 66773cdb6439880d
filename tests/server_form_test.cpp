// The edits route's parsers: base64 both ways, the image fields of a request (JSON, and the parts of a form as
// parse_multipart reads them from a body), and the bad images and forms that must be 400s naming their field or
// limit (tests/server/img2img_test.py and guard_test.py send real bodies).
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <tuple>

#include "golden.h"
#include "io/png.h"
#include "server/api_error.h"
#include "server/form_data.h"
#include "server/request_parse.h"

namespace ernie::server {
namespace {

template <class F>
ApiError api_error_of(F&& f) {
  try {
    f();
  } catch (const ApiException& e) {
    return e.error;
  }
  ADD_FAILURE() << "no ApiException";
  return {};
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
std::string input_png() { return file_bytes(test::data_dir() + "/img2img/case2_input.png"); }  // 16x16 RGB
std::string mask_png() { return file_bytes(test::data_dir() + "/img2img/case3_mask.png"); }    // 32x32 grey

FormPart part(const std::string& name, const std::string& data, const std::string& filename = "") {
  return {name, filename, filename.empty() ? "" : "image/png", data};
}
using Parts = std::vector<FormPart>;
Parts operator+(Parts a, const FormPart& b) {
  a.push_back(b);
  return a;
}
Parts operator+(const FormPart& a, const FormPart& b) { return Parts{a, b}; }

TEST(Base64, DecodesWhatItEncodesAndRejectsTheRest) {
  for (std::string s : {std::string(""), std::string("f"), std::string("fo"), std::string("foo"), std::string("\xff\x00\xfe\x01", 4)})
    EXPECT_EQ(base64_decode(base64_encode(s), "image"), s);
  EXPECT_EQ(base64_decode("Zm9vYg", "image"), "foob");  // unpadded
  EXPECT_EQ(base64_decode("data:image/png;base64,Zm9v", "image"), "foo");
  for (const char* bad : {"Zm9", "Zm9v!", "Zm 9v", "Z===", "Zh==", "data:text/plain,foo", "Zm9vY"}) {
    const ApiError e = api_error_of([&] { base64_decode(bad, "mask"); });
    EXPECT_EQ(e.status, 400) << bad;
    EXPECT_EQ(e.param, "mask") << bad;
  }
}

TEST(EditRequest, FormFieldsAreTypedLikeTheJsonBody) {
  const Parts body = part("image", input_png(), "in.png") + part("prompt", "a cat") + part("n", "2") +
                     part("size", "16x16") + part("strength", "0.5") + part("composite", "false") +
                     part("model", "ernie-image") + part("response_format", "b64_json");
  const ParsedRequest p = parse_edit_form(body);
  EXPECT_EQ(p.req.prompt, "a cat");
  EXPECT_EQ(p.req.num_images, 2);
  EXPECT_EQ(p.req.width, 16);
  EXPECT_FLOAT_EQ(p.req.strength, 0.5f);
  ASSERT_TRUE(p.req.init_image.has_value());
  EXPECT_EQ(p.req.init_image->width, 16);
  EXPECT_FALSE(p.req.mask.has_value());
  // image[] (the SDK's name for a list) and a mask; a mask with no transparency has no alpha
  const ParsedRequest q =
      parse_edit_form(part("image[]", input_png(), "in.png") + part("mask", mask_png(), "m.png") + part("prompt", "x"));
  ASSERT_TRUE(q.req.mask.has_value());
  EXPECT_EQ(q.req.mask->width, 32);
  EXPECT_TRUE(q.req.mask->alpha.empty());
}

// seed, in a JSON body and in a form: -1 (or none) is random, left to the server to draw; 0 to 2^64 - 1 is that
// seed; anything else is a 400 naming `seed` (issue 26: the CLI and the server agree).
TEST(EditRequest, SeedsAreTheCommandLinesSeeds) {
  for (const auto& [v, given, seed] : std::vector<std::tuple<std::string, bool, uint64_t>>{
           {"-1", false, 0}, {"0", true, 0}, {"42", true, 42}, {"18446744073709551615", true, UINT64_MAX}}) {
    const ParsedRequest j = parse_generation_request("{\"prompt\": \"x\", \"seed\": " + v + "}");
    EXPECT_EQ(j.seed_given, given) << v;
    if (given) { EXPECT_EQ(j.req.seed, seed) << v; }
    const ParsedRequest f = parse_edit_form(part("image", input_png(), "in.png") + part("prompt", "x") + part("seed", v));
    EXPECT_EQ(f.seed_given, given) << v;
    if (given) { EXPECT_EQ(f.req.seed, seed) << v; }
  }
  EXPECT_FALSE(parse_generation_request("{\"prompt\": \"x\"}").seed_given);
  for (const std::string bad : {"-2", "18446744073709551616", "1.5", "\"abc\"", "\"7\"", "true"}) {
    const ApiError e = api_error_of([&] { parse_generation_request("{\"prompt\": \"x\", \"seed\": " + bad + "}"); });
    EXPECT_EQ(e.status, 400) << bad;
    EXPECT_EQ(e.param, "seed") << bad;
  }
  for (const std::string bad : {"-2", "18446744073709551616", "1.5", "abc", " 7x"}) {
    const ApiError e = api_error_of(
        [&] { parse_edit_form(part("image", input_png(), "in.png") + part("prompt", "x") + part("seed", bad)); });
    EXPECT_EQ(e.status, 400) << bad;
    EXPECT_EQ(e.param, "seed") << bad;
  }
}

TEST(EditRequest, BadImagesAndFormsAre400sNamingTheField) {
  auto form_error = [](const Parts& parts) { return api_error_of([&] { parse_edit_form(parts); }); };
  const std::string png = input_png();
  struct Case {
    Parts parts;
    std::string param;
  };
  std::string huge = png;  // a 100 MP header: refused before any decoding
  huge[16] = 0, huge[17] = 0, huge[18] = 0x27, huge[19] = 0x10, huge[20] = 0, huge[21] = 0, huge[22] = 0x27, huge[23] = 0x10;
  const std::vector<Case> cases = {
      {Parts{part("prompt", "x")}, "image"},                                            // no image
      {part("image", "GIF89a....", "a.gif") + part("prompt", "x"), "image"},           // not a PNG
      {part("image", png.substr(0, png.size() / 2), "t.png") + part("prompt", "x"), "image"},  // truncated
      {part("image", huge, "h.png") + part("prompt", "x"), "image"},                   // 10000x10000
      {part("image", png, "a.png") + part("image[]", png, "b.png") + part("prompt", "x"), "image"},
      {part("image", png, "a.png") + part("mask", "nope", "m.png") + part("prompt", "x"), "mask"},
      {part("image", png, "a.png") + part("prompt", "x") + part("strength", "1.5"), "strength"},
      {part("image", png, "a.png") + part("prompt", "x") + part("strength", "strong"), "strength"},
      {part("image", png, "a.png") + part("prompt", "x") + part("n", "two"), "n"},
      {part("image", png, "a.png") + part("prompt", "x") + part("prompt", "y"), "prompt"},
      {part("image", png, "a.png") + part("prompt", "x") + part("mask_blur", "-1"), "mask_blur"},
      {part("image", png, "a.png") + part("prompt", "x") + part("wat", "1"), "wat"},
  };
  for (const Case& c : cases) {
    const ApiError e = form_error(c.parts);
    EXPECT_EQ(e.status, 400) << c.param << ": " << e.message;
    EXPECT_EQ(e.param, c.param) << e.message;
  }
  EXPECT_NE(form_error(cases[3].parts).message.find("too large"), std::string::npos);
}

TEST(EditRequest, JsonImagesAreBase64Pngs) {
  const std::string b64 = base64_encode(input_png());
  const ParsedRequest p = parse_generation_request(
      R"({"prompt": "x", "image": ")" + b64 + R"(", "strength": 0.6, "mask_blur": 3, "resize": true})", {}, true);
  ASSERT_TRUE(p.req.init_image.has_value());
  EXPECT_EQ(p.req.init_image->height, 16);
  EXPECT_EQ(p.req.mask_blur, 3);
  EXPECT_TRUE(p.req.resize);
  auto json_error = [](const std::string& body, bool edit) {
    return api_error_of([&] { parse_generation_request(body, {}, edit); });
  };
  EXPECT_EQ(json_error(R"({"prompt": "x"})", true).param, "image");
  EXPECT_EQ(json_error(R"({"prompt": "x", "image": 3})", false).param, "image");
  EXPECT_EQ(json_error(R"({"prompt": "x", "image": "!!!!"})", false).code, "invalid_base64");
  EXPECT_EQ(json_error(R"({"prompt": "x", "mask": ")" + base64_encode("not a png") + R"("})", false).code, "invalid_image");
  EXPECT_EQ(json_error(R"({"prompt": "x", "composite": "yes"})", false).param, "composite");
}

const char* kType = "multipart/form-data; boundary=XyZ";
std::string mpart(const std::string& head, const std::string& data) { return "--XyZ\r\n" + head + "\r\n\r\n" + data + "\r\n"; }

TEST(Multipart, ReadsNamesFilenamesTypesAndData) {
  const std::string body = "preamble\r\n" +
                           mpart("Content-Disposition: form-data; name=\"prompt\"", "a cat") +
                           mpart("content-disposition: form-data; name=image; filename=\"a \\\"b\\\".png\"\r\n"
                                 "Content-Type: image/png", std::string("\x89PNG\r\n--XyZnot\0x", 15)) +
                           "--XyZ--\r\nepilogue";
  const std::vector<FormPart> p = parse_multipart(kType, body);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].name, "prompt");
  EXPECT_EQ(p[0].data, "a cat");
  EXPECT_EQ(p[1].name, "image");
  EXPECT_EQ(p[1].filename, "a \"b\".png");
  EXPECT_EQ(p[1].content_type, "image/png");
  EXPECT_EQ(p[1].data, std::string("\x89PNG\r\n--XyZnot\0x", 15));
  EXPECT_EQ(parse_multipart("Multipart/Form-Data; boundary=\"XyZ\"", mpart("Content-Disposition: form-data; name=a", "") +
                                                                         "--XyZ--").size(), 1u);
}

TEST(Multipart, PartCountAndPartHeadLimitsAreNamedAtOnce) {
  std::string body;
  for (int i = 0; i < 10000; ++i) body += mpart("Content-Disposition: form-data; name=\"p" + std::to_string(i) + "\"", "v");
  ApiError e = api_error_of([&] { parse_multipart(kType, body + "--XyZ--"); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "too_many_parts");
  EXPECT_NE(e.message.find("more than 64 parts"), std::string::npos) << e.message;
  // 64 parts are fine.
  std::string ok;
  for (int i = 0; i < 64; ++i) ok += mpart("Content-Disposition: form-data; name=p", "v");
  EXPECT_EQ(parse_multipart(kType, ok + "--XyZ--").size(), 64u);
  e = api_error_of([&] {
    parse_multipart(kType, mpart("Content-Disposition: form-data; name=a\r\nX-Pad: " + std::string(9000, 'a'), "v") + "--XyZ--");
  });
  EXPECT_EQ(e.code, "part_head_too_large");
  EXPECT_NE(e.message.find("8192 bytes"), std::string::npos) << e.message;
}

TEST(Multipart, MalformedBodiesAre400s) {
  const std::string good = mpart("Content-Disposition: form-data; name=a", "v");
  for (const auto& [type, body] : std::vector<std::pair<std::string, std::string>>{
           {"application/json", good + "--XyZ--"},
           {"multipart/form-data", good + "--XyZ--"},                    // no boundary
           {"multipart/form-data; boundary=" + std::string(71, 'b'), ""},  // too long
           {kType, "no boundary line at all"},
           {kType, good},                                                  // not closed
           {kType, "--XyZ\r\nContent-Disposition: form-data; name=a\r\n"},  // head without end
           {kType, mpart("Content-Disposition: attachment; name=a", "v") + "--XyZ--"},
           {kType, mpart("Content-Disposition: form-data", "v") + "--XyZ--"},  // no name
           {kType, mpart("Content-Type: text/plain", "v") + "--XyZ--"},        // no disposition
           {kType, mpart("Content-Disposition: form-data; name=\"a", "v") + "--XyZ--"},
           {kType, "--XyZ\r\n\r\nv\r\n--XyZ--"},
           {kType, "--XyZjunk\r\n"}}) {
    const ApiError e = api_error_of([&, &t = type, &b = body] { parse_multipart(t, b); });
    EXPECT_EQ(e.status, 400) << type << " | " << body;
    EXPECT_EQ(e.message.rfind("multipart body: ", 0), 0u) << e.message;
  }
}

}  // namespace
}  // namespace ernie::server
