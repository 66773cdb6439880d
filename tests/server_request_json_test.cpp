// The shared queue's form of a request (server/request_json.h): what an api node stores must parse back, on the
// worker, to the request the client sent: every field, the drawn seed, and the images pixel for pixel (a mask's
// alpha too).
#include <gtest/gtest.h>

#include "engine/noise.h"
#include "io/png.h"
#include "server/form_data.h"
#include "server/request_json.h"

namespace ernie::server {
namespace {

ParsedRequest round_trip(const ParsedRequest& p) { return parse_generation_request(request_to_json(p).dump()); }

std::string png_b64(int w, int h, bool alpha) {
  std::vector<uint8_t> rgb(size_t(w * h * 3)), a;
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = uint8_t(i * 37 + 5);
  if (alpha)
    for (int i = 0; i < w * h; ++i) a.push_back(uint8_t(i * 51));
  const auto png = encode_png(w, h, rgb, {}, a);
  return base64_encode(std::string(png.begin(), png.end()));
}

TEST(RequestJson, EveryFieldSurvives) {
  const std::string body = R"({"prompt": "a cat <lora:style:0.5>", "negative_prompt": "blur", "n": 3,
    "size": "512x256", "steps": 7, "guidance_scale": 1.1, "seed": 18446744073709551615, "use_pe": true,
    "sampler": "dpmpp_2m", "shift": 2.5, "rng": "ernie", "response_format": "url",
    "loras": [{"name": "a", "scale": -0.75}, {"name": "b", "scale": 2}]})";
  const ParsedRequest p = parse_generation_request(body);
  const ParsedRequest q = round_trip(p);
  const GenerateRequest &a = p.req, &b = q.req;
  EXPECT_EQ(b.prompt, a.prompt);
  EXPECT_EQ(b.negative_prompt, "blur");
  EXPECT_EQ(b.num_images, 3);
  EXPECT_EQ(b.width, 512);
  EXPECT_EQ(b.height, 256);
  EXPECT_EQ(b.steps, 7);
  EXPECT_EQ(b.cfg, a.cfg);  // float -> JSON double -> float is exact
  EXPECT_EQ(b.seed, 18446744073709551615ull);
  EXPECT_TRUE(q.seed_given);
  EXPECT_TRUE(b.use_pe);
  EXPECT_EQ(b.sampler, a.sampler);
  EXPECT_EQ(b.shift, 2.5f);
  EXPECT_EQ(b.rng, a.rng);
  EXPECT_TRUE(q.url);
  ASSERT_EQ(b.loras.size(), 2u);
  EXPECT_EQ(b.loras[0].name, "a");
  EXPECT_EQ(b.loras[0].scale, -0.75f);
  EXPECT_EQ(b.loras[1].name, "b");
  EXPECT_FALSE(b.init_image);
  // Stable: the stored form of the stored form is itself.
  EXPECT_EQ(request_to_json(q), request_to_json(p));
}

TEST(RequestJson, DefaultsStayDefaultsAndTheSeedIsAlwaysWritten) {
  ParsedRequest p = parse_generation_request(R"({"prompt": "x"})");
  EXPECT_FALSE(p.seed_given);
  p.req.seed = 42;  // what the api node drew
  const auto j = request_to_json(p);
  EXPECT_EQ(j.at("seed"), 42u);
  EXPECT_FALSE(j.contains("size"));
  EXPECT_FALSE(j.contains("steps"));
  EXPECT_FALSE(j.contains("guidance_scale"));  // the worker's model picks them
  EXPECT_FALSE(j.contains("shift"));
  EXPECT_FALSE(j.contains("response_format"));
  const ParsedRequest q = round_trip(p);
  EXPECT_EQ(q.req.width, 0);
  EXPECT_EQ(q.req.steps, 0);
  EXPECT_EQ(q.req.cfg, p.req.cfg);
  EXPECT_EQ(q.req.seed, 42u);
}

TEST(RequestJson, ImagesAndMaskArePixelExact) {
  const std::string body = R"({"prompt": "p", "image": ")" + png_b64(5, 4, false) + R"(", "mask": ")" +
                           png_b64(5, 4, true) +
                           R"(", "strength": 0.6, "mask_blur": 3, "composite": true, "resize": true, "seed": 1})";
  const ParsedRequest p = parse_generation_request(body, {}, true);
  const ParsedRequest q = round_trip(p);
  ASSERT_TRUE(q.req.init_image && q.req.mask);
  EXPECT_EQ(q.req.init_image->rgb, p.req.init_image->rgb);
  EXPECT_TRUE(q.req.init_image->alpha.empty());
  EXPECT_EQ(q.req.mask->rgb, p.req.mask->rgb);
  EXPECT_EQ(q.req.mask->alpha, p.req.mask->alpha);
  EXPECT_FALSE(q.req.mask->alpha.empty());
  EXPECT_EQ(q.req.strength, 0.6f);
  EXPECT_EQ(q.req.mask_blur, 3);
  EXPECT_TRUE(q.req.composite);
  EXPECT_TRUE(q.req.resize);
}

}  // namespace
}  // namespace ernie::server
