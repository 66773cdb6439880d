// The A1111 web API's mapping (server/a1111.h): request bodies as Open WebUI, SillyTavern and LibreChat send them
// -> our requests, our results -> A1111's response, the infotext parser, the lists, the auth and error shapes.
#include <gtest/gtest.h>

#include "engine/metadata.h"
#include "engine/noise.h"
#include "io/png.h"
#include "server/a1111.h"
#include "server/form_data.h"

namespace ernie::server {
namespace {
using nlohmann::json;

std::string png_b64(int w, int h, const std::vector<std::pair<std::string, std::string>>& text = {}) {
  std::vector<uint8_t> rgb(size_t(w * h * 3));
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = uint8_t(i * 37 + 5);
  const auto png = encode_png(w, h, rgb, text);
  return base64_encode(std::string(png.begin(), png.end()));
}

// The ApiError a body gets (status 0 when it parses).
ApiError error_of(const std::string& body, bool img2img = false) {
  try {
    a1111::parse_request(body, img2img);
  } catch (const ApiException& e) {
    return e.error;
  }
  return ApiError{0, "", "", "", ""};
}

TEST(A1111, Txt2ImgFieldsMapToOurs) {
  const auto a = a1111::parse_request(R"({"prompt": "a cat", "negative_prompt": "blur", "steps": 7, "cfg_scale": 2.5,
    "width": 512, "height": 256, "seed": 42, "batch_size": 2, "n_iter": 3, "sampler_name": "DPM++ 2M",
    "scheduler": "Automatic", "override_settings": {"sd_model_checkpoint": "x", "CLIP_stop_at_last_layers": 2},
    "eta": 0, "s_churn": 0, "save_images": false, "send_images": true, "restore_faces": false, "enable_hr": false,
    "styles": [], "alwayson_scripts": {}, "denoising_strength": 0.7})",
                                      false);
  const GenerateRequest& r = a.parsed.req;
  EXPECT_EQ(r.prompt, "a cat");
  EXPECT_EQ(r.negative_prompt, "blur");
  EXPECT_EQ(r.steps, 7);
  EXPECT_FLOAT_EQ(r.cfg, 2.5f);
  EXPECT_EQ(r.width, 512);
  EXPECT_EQ(r.height, 256);
  EXPECT_EQ(r.seed, 42u);
  EXPECT_TRUE(a.parsed.seed_given);
  EXPECT_EQ(r.num_images, 6);  // batch_size x n_iter
  EXPECT_EQ(a.batch_size, 2);
  EXPECT_EQ(a.n_iter, 3);
  EXPECT_EQ(r.sampler, SamplerKind::DpmPP2M);
  EXPECT_EQ(a.sampler_name, "DPM++ 2M");
  EXPECT_EQ(a.scheduler, "automatic");
  EXPECT_FALSE(r.init_image);  // txt2img ignores denoising_strength (a hires. fix field)
}

TEST(A1111, DefaultsAreTheModelsAndSeedMinusOneIsRandom) {
  const auto a = a1111::parse_request(R"({"prompt": "x", "seed": -1})", false);
  EXPECT_FALSE(a.parsed.seed_given);
  EXPECT_EQ(a.parsed.req.steps, 0);       // the model's default
  EXPECT_EQ(a.parsed.req.cfg, kCfgDefault);
  EXPECT_EQ(a.parsed.req.width, 0);
  EXPECT_EQ(a.parsed.req.num_images, 1);
  EXPECT_EQ(a.parsed.req.sampler, SamplerKind::Euler);
  EXPECT_EQ(a.sampler_name, "Euler");
  // Old clients send sampler_index; sampler_name wins when both come.
  EXPECT_EQ(a1111::parse_request(R"({"prompt": "x", "sampler_index": "UniPC"})", false).parsed.req.sampler,
            SamplerKind::UniPC);
  EXPECT_EQ(a1111::parse_request(R"({"prompt": "x", "sampler_index": "UniPC", "sampler_name": "Euler"})", false)
                .parsed.req.sampler,
            SamplerKind::Euler);
}

TEST(A1111, Img2ImgTakesInitImageMaskAndStrength) {
  const std::string img = png_b64(32, 32);
  const auto a = a1111::parse_request(json{{"prompt", "x"}, {"init_images", json::array({"data:image/png;base64," + img})},
                                           {"mask", img}, {"denoising_strength", 0.4}, {"mask_blur", 4},
                                           {"inpainting_fill", 1}, {"inpaint_full_res", true}, {"resize_mode", 0}}
                                          .dump(),
                                      true);
  const GenerateRequest& r = a.parsed.req;
  ASSERT_TRUE(r.init_image);
  EXPECT_EQ(r.init_image->width, 32);
  ASSERT_TRUE(r.mask);
  EXPECT_FLOAT_EQ(r.strength, 0.4f);
  EXPECT_EQ(r.mask_blur, 4);
  EXPECT_TRUE(r.composite);  // A1111 pastes the unmasked pixels back
  EXPECT_TRUE(r.resize);     // and resizes the init image to width x height
  // A1111's default strength is 0.75, with or without a mask.
  EXPECT_FLOAT_EQ(a1111::parse_request(json{{"prompt", "x"}, {"init_images", json::array({img})}}.dump(), true).parsed.req.strength,
                  0.75f);
}

TEST(A1111, BadBodiesAre422NamingTheField) {
  struct Case {
    const char* body;
    const char* field;
  } cases[] = {
      {R"({"prompt": "x", "steps": "many"})", "steps"},
      {R"({"prompt": "x", "steps": 0})", "steps"},
      {R"({"prompt": "x", "steps": 2.5})", "steps"},
      {R"({"prompt": "x", "width": 99999})", "width"},
      {R"({"prompt": "x", "height": -16})", "height"},
      {R"({"prompt": "x", "cfg_scale": "7"})", "cfg_scale"},
      {R"({"prompt": "x", "cfg_scale": 1e9})", "cfg_scale"},
      {R"({"prompt": "x", "seed": -5})", "seed"},
      {R"({"prompt": "x", "seed": "7"})", "seed"},
      {R"({"prompt": "x", "batch_size": 0})", "batch_size"},
      {R"({"prompt": "x", "batch_size": 4, "n_iter": 4})", "n_iter"},
      {R"({"prompt": 5})", "prompt"},
      {R"({"prompt": "  "})", "prompt"},
      {R"({})", "prompt"},
      {R"({"prompt": "x", "sampler_name": "Euler a"})", "sampler_name"},
      {R"({"prompt": "x", "scheduler": "Karras"})", "scheduler"},
      {R"({"prompt": "x", "enable_hr": true})", "enable_hr"},
      {R"({"prompt": "x", "restore_faces": true})", "restore_faces"},
      {R"({"prompt": "x", "styles": ["s"]})", "styles"},
      {R"({"prompt": "x", "alwayson_scripts": {"controlnet": {}}})", "alwayson_scripts"},
      {R"({"prompt": "x", "override_settings": 3})", "override_settings"},
      {R"([1, 2])", ""},
      {R"({"prompt": )", ""},
      {"", ""},
  };
  for (const Case& c : cases) {
    const ApiError e = error_of(c.body);
    EXPECT_EQ(e.status, 422) << c.body;
    EXPECT_EQ(e.param, c.field) << c.body << ": " << e.message;
    EXPECT_FALSE(e.message.empty()) << c.body;
    const json j = a1111::error_json(e);  // FastAPI's shape
    ASSERT_TRUE(j["detail"].is_array()) << j;
    EXPECT_EQ(j["detail"][0]["msg"], e.message);
    if (*c.field) {
      EXPECT_EQ(j["detail"][0]["loc"], json::array({"body", c.field}));
    }
  }
  // The accepted names are listed.
  EXPECT_NE(error_of(R"({"prompt": "x", "sampler_name": "LMS"})").message.find("Euler, DPM++ 2M, UniPC"), std::string::npos);
  EXPECT_NE(error_of(R"({"prompt": "x", "scheduler": "karras"})").message.find("Automatic"), std::string::npos);
}

TEST(A1111, Img2ImgBadImagesNameInitImages) {
  EXPECT_EQ(error_of(R"({"prompt": "x"})", true).param, "init_images");  // required
  EXPECT_EQ(error_of(R"({"prompt": "x", "init_images": "abc"})", true).param, "init_images");
  EXPECT_EQ(error_of(R"({"prompt": "x", "init_images": ["!!!"]})", true).param, "init_images");
  EXPECT_EQ(error_of(R"({"prompt": "x", "init_images": ["aGVsbG8="]})", true).status, 422);  // not an image
  const std::string img = png_b64(16, 16);
  EXPECT_EQ(error_of(json{{"prompt", "x"}, {"init_images", json::array({img, img})}}.dump(), true).param, "init_images");
  EXPECT_EQ(error_of(json{{"prompt", "x"}, {"init_images", json::array({img})}, {"denoising_strength", 0}}.dump(), true).param,
            "denoising_strength");
  EXPECT_EQ(error_of(json{{"prompt", "x"}, {"init_images", json::array({img})}, {"mask", 5}}.dump(), true).param, "mask");
}

TEST(A1111, ResponseHasImagesParametersAndInfo) {
  auto a = a1111::parse_request(R"({"prompt": "a cat", "seed": -1, "batch_size": 2, "steps": 2, "width": 32,
    "height": 32, "custom_client_field": 7})",
                                false);
  GenerateRequest r = a.parsed.req;
  r.seed = 123;
  r.steps = 2;
  r.cfg = 4.2f;
  r.width = r.height = 32;
  r.rng = NoiseRng::Ernie;
  ImageMeta m;
  m.request = r;
  m.model = "tiny";
  m.seed = 123;
  const std::string text = a1111_parameters(m);
  const auto png = encode_png(2, 2, std::vector<uint8_t>(12, 9), {{"parameters", text}});
  const std::string p(png.begin(), png.end());
  const json out = a1111::response(a, r, {p, p}, "tiny", 1700000000);
  ASSERT_EQ(out["images"].size(), 2u);
  EXPECT_EQ(base64_decode(out["images"][0].get<std::string>(), "x"), p);
  EXPECT_EQ(out["parameters"]["prompt"], "a cat");
  EXPECT_EQ(out["parameters"]["seed"], -1);  // echoed as sent
  EXPECT_EQ(out["parameters"]["sampler_name"], "Euler");
  EXPECT_EQ(out["parameters"]["custom_client_field"], 7);
  ASSERT_TRUE(out["info"].is_string());
  const json info = json::parse(out["info"].get<std::string>());
  EXPECT_EQ(info["seed"], 123);
  EXPECT_EQ(info["all_seeds"], json::array({123, 124}));  // the ernie generator: seed + index
  EXPECT_EQ(info["infotexts"][0], text);
  EXPECT_EQ(info["sampler_name"], "Euler");
  EXPECT_EQ(info["steps"], 2);
  EXPECT_EQ(info["cfg_scale"], 4.2);  // the decimal, not the float's double (4.199999809...)
  EXPECT_EQ(out["parameters"]["cfg_scale"], 4.2);
  EXPECT_EQ(info["width"], 32);
  EXPECT_EQ(info["sd_model_name"], "tiny");
  EXPECT_EQ(info["job_timestamp"], "20231114221320");
  EXPECT_EQ(info["all_prompts"].size(), 2u);
}

TEST(A1111, InfotextParsesOurParameters) {
  GenerateRequest r;
  r.prompt = "a cat\non two lines";
  r.negative_prompt = "blur";
  r.steps = 2;
  r.cfg = 4.5f;
  r.width = 32;
  r.height = 48;
  ImageMeta m;
  m.request = r;
  m.model = "tiny";
  m.seed = 7;
  const json p = a1111::parse_infotext(a1111_parameters(m));
  EXPECT_EQ(p["Prompt"], "a cat\non two lines");
  EXPECT_EQ(p["Negative prompt"], "blur");
  EXPECT_EQ(p["Steps"], "2");
  EXPECT_EQ(p["Sampler"], "Euler");
  EXPECT_EQ(p["CFG scale"], "4.5");
  EXPECT_EQ(p["Seed"], "7");
  EXPECT_EQ(p["Size-1"], "32");
  EXPECT_EQ(p["Size-2"], "48");
  // A quoted value keeps its commas.
  const json q = a1111::parse_infotext("x\nSteps: 2, Lora hashes: \"a: 1, b: 2\", Seed: 3");
  EXPECT_EQ(q["Lora hashes"], "a: 1, b: 2");
  EXPECT_EQ(q["Seed"], "3");
  // A piece without a key is skipped, as A1111's parser does.
  const json k = a1111::parse_infotext("x\nSteps: 2, odd piece, Seed: 3, Sampler: Euler");
  EXPECT_EQ(k["Seed"], "3");
  EXPECT_EQ(k["Sampler"], "Euler");
  // No parameters line: all prompt.
  EXPECT_EQ(a1111::parse_infotext("just a prompt")["Prompt"], "just a prompt");
}

TEST(A1111, PngInfoReadsTheChunks) {
  const std::string img = png_b64(4, 4, {{"parameters", "a dog\nSteps: 3, Sampler: Euler, Seed: 9"}, {"ernie-image", "{}"}});
  const json j = a1111::png_info(json{{"image", "data:image/png;base64," + img}}.dump());
  EXPECT_EQ(j["info"], "a dog\nSteps: 3, Sampler: Euler, Seed: 9");
  EXPECT_EQ(j["items"]["ernie-image"], "{}");
  EXPECT_EQ(j["parameters"]["Steps"], "3");
  EXPECT_THROW(a1111::png_info(R"({"image": "aGVsbG8="})"), ApiException);
  EXPECT_THROW(a1111::png_info(R"({})"), ApiException);
  EXPECT_THROW(a1111::png_info(R"({"image": 3})"), ApiException);
}

TEST(A1111, ListsAndOptions) {
  EXPECT_EQ(a1111::samplers().size(), 3u);
  EXPECT_EQ(a1111::samplers()[1]["name"], "DPM++ 2M");
  // Every listed name is accepted back.
  for (const json& s : a1111::samplers()) EXPECT_NO_THROW(a1111::parse_sampler_name(s["name"].get<std::string>()));
  for (const json& s : a1111::schedulers()) {
    EXPECT_NO_THROW(a1111::parse_scheduler(s["name"].get<std::string>()));
    EXPECT_NO_THROW(a1111::parse_scheduler(s["label"].get<std::string>()));
  }
  EXPECT_EQ(a1111::sd_models("tiny", "/m/tiny")[0]["title"], "tiny");
  EXPECT_EQ(a1111::options("tiny")["sd_model_checkpoint"], "tiny");
  EXPECT_EQ(a1111::loras({{"style", 10}}, "")[0]["name"], "style");
  EXPECT_NO_THROW(a1111::check_options(R"({"sd_model_checkpoint": "tiny", "CLIP_stop_at_last_layers": 2})", "tiny"));
  EXPECT_NO_THROW(a1111::check_options(R"({"sd_model_checkpoint": "tiny [abc123]"})", "tiny"));
  EXPECT_NO_THROW(a1111::check_options(R"({"samples_format": "png"})", "tiny"));
  EXPECT_THROW(a1111::check_options(R"({"sd_model_checkpoint": "sdxl"})", "tiny"), ApiException);
  EXPECT_THROW(a1111::check_options(R"([1])", "tiny"), ApiException);
  const json idle = a1111::progress(nullptr, 0);
  EXPECT_EQ(idle["progress"], 0.0);
  const json busy = a1111::progress({{"id", "job_1"}, {"step", 1}, {"total", 4}}, 2);
  EXPECT_EQ(busy["progress"], 0.25);
  EXPECT_EQ(busy["state"]["sampling_step"], 1);
  EXPECT_EQ(busy["state"]["job_count"], 2);
}

TEST(A1111, AuthTakesBearerOrBasicWithTheKeyAsPassword) {
  EXPECT_TRUE(a1111::authorized(0, "", ""));
  EXPECT_FALSE(a1111::authorized(0, "", "sekrit"));
  EXPECT_TRUE(a1111::authorized(1, "Bearer sekrit", "sekrit"));
  EXPECT_TRUE(a1111::authorized(1, "Basic " + base64_encode("user:sekrit"), "sekrit"));
  EXPECT_TRUE(a1111::authorized(1, "basic " + base64_encode(":sekrit"), "sekrit"));
  EXPECT_FALSE(a1111::authorized(1, "Basic " + base64_encode("user:wrong!"), "sekrit"));
  EXPECT_FALSE(a1111::authorized(1, "Basic " + base64_encode("sekrit"), "sekrit"));  // no colon
  EXPECT_FALSE(a1111::authorized(1, "Basic !!!", "sekrit"));
  EXPECT_FALSE(a1111::authorized(2, "Basic " + base64_encode("u:sekrit"), "sekrit"));  // two headers
}

}  // namespace
}  // namespace ernie::server
