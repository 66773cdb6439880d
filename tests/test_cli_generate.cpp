// `ernie-image generate` and `encode` through the binary: PNG with both metadata chunks, batch naming,
// latents save/restore reproducing the same bytes, and every bad input failing before compute with its
// message and no file written.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "cli.h"
#include "golden.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "ops/ops.h"

using namespace ernie;
using test::run_cli;
using test::TempDir;
namespace fs = std::filesystem;

namespace {

std::string tiny_gen(const std::string& extra) {
  return "generate --model '" + test::tiny_model() + "' -p 'a cat' -W 16 -H 16 --steps 2 --threads 1 " + extra;
}

std::vector<char> bytes_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

size_t files_in(const TempDir& d) {
  size_t n = 0;
  for (auto& e : fs::directory_iterator(d.path)) n += e.is_regular_file();
  return n;
}

}  // namespace

TEST(CliGenerate, WritesPngWithBothMetadataChunks) {
  TempDir d;
  std::string out = d.str() + "/a.png";
  auto r = run_cli(tiny_gen("--seed 3 -n blurry --cfg 2.5 -o '" + out + "'"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find(out), std::string::npos) << r.out;  // the path is printed
  PngImage img = read_png(out);
  EXPECT_EQ(img.width, 16);
  EXPECT_EQ(img.height, 16);
  ASSERT_TRUE(img.text.count("parameters")) << "no parameters chunk";
  const std::string& a1111 = img.text["parameters"];
  EXPECT_EQ(a1111.rfind("a cat\nNegative prompt: blurry\nSteps: 2, Sampler: Euler", 0), 0u) << a1111;
  EXPECT_NE(a1111.find("CFG scale: 2.5, Seed: 3, Size: 16x16, Model: "), std::string::npos) << a1111;
  EXPECT_NE(a1111.find("Version: ernie-image "), std::string::npos) << a1111;
  ASSERT_TRUE(img.text.count("ernie-image")) << "no ernie-image chunk";
  auto j = nlohmann::json::parse(img.text["ernie-image"]);
  EXPECT_EQ(j["prompt"], "a cat");
  EXPECT_EQ(j["negative_prompt"], "blurry");
  EXPECT_EQ(j["revised_prompt"], "a cat");
  EXPECT_EQ(j["steps"], 2);
  EXPECT_DOUBLE_EQ(j["cfg"].get<double>(), 2.5);
  EXPECT_EQ(j["seed"], 3);
  EXPECT_EQ(j["width"], 16);
  EXPECT_EQ(j["height"], 16);
  EXPECT_TRUE(j["model"].is_string());
  EXPECT_EQ(j["engine"].get<std::string>().rfind("ernie-image ", 0), 0u);
}

TEST(CliGenerate, PromptEnhancerRecordsRevisedPrompt) {
  TempDir d;
  auto r = run_cli(tiny_gen("--seed 13 --pe -o '" + d.str() + "/a.png'"));  // seed 13: the tiny enhancer stops after 13 tokens
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("revised prompt: "), std::string::npos);
  PngImage img = read_png(d.str() + "/a.png");
  auto j = nlohmann::json::parse(img.text["ernie-image"]);
  EXPECT_EQ(j["prompt"], "a cat");
  EXPECT_EQ(j["prompt_enhancer"], true);
  EXPECT_NE(j["revised_prompt"], "a cat");
  EXPECT_NE(img.text["parameters"].find("Prompt enhancer: true"), std::string::npos);
}

TEST(CliGenerate, BatchNamesWithIndex) {
  TempDir d;
  auto r = run_cli(tiny_gen("--seed 9 --batch 2 --rng ernie --quiet -o '" + d.str() + "/img_%03d.png'"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "");  // --quiet
  ASSERT_TRUE(fs::exists(d.path / "img_000.png"));
  ASSERT_TRUE(fs::exists(d.path / "img_001.png"));
  EXPECT_EQ(files_in(d), 2u);
  PngImage a = read_png((d.path / "img_000.png").string()), b = read_png((d.path / "img_001.png").string());
  EXPECT_NE(a.rgb, b.rgb);
  auto ja = nlohmann::json::parse(a.text["ernie-image"]), jb = nlohmann::json::parse(b.text["ernie-image"]);
  EXPECT_EQ(ja["seed"], 9);
  EXPECT_EQ(jb["seed"], 10);  // image i uses seed + i
  EXPECT_EQ(jb["batch_index"], 1);
  // Image 1 of the batch is reproduced alone with its own seed.
  auto r2 = run_cli(tiny_gen("--seed 10 --rng ernie --quiet -o '" + d.str() + "/single.png'"));
  ASSERT_EQ(r2.status, 0) << r2.out;
  PngImage s = read_png((d.path / "single.png").string());
  int maxd = 0;
  for (size_t i = 0; i < s.rgb.size(); ++i) maxd = std::max(maxd, std::abs(int(s.rgb[i]) - int(b.rgb[i])));
  EXPECT_LE(maxd, 1);
}

TEST(CliGenerate, BatchWithoutIndexGetsSuffix) {
  TempDir d;
  auto r = run_cli(tiny_gen("--batch 2 --quiet -o '" + d.str() + "/x.png'"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(fs::exists(d.path / "x_0.png"));
  EXPECT_TRUE(fs::exists(d.path / "x_1.png"));
}

TEST(CliGenerate, SavedLatentsReproduceTheSameBytes) {
  TempDir d;
  std::string lat = d.str() + "/noise.safetensors";
  auto r1 = run_cli(tiny_gen("--seed 5 --quiet --save-latents '" + lat + "' -o '" + d.str() + "/a.png'"));
  ASSERT_EQ(r1.status, 0) << r1.out;
  auto f = SafeTensorsFile::open(lat);
  ASSERT_NE(f->find("latents"), nullptr);
  EXPECT_EQ(f->find("latents")->shape, (Shape{1, 32, 4, 4}));
  // No --seed, no size: both come from the file.
  auto r2 = run_cli("generate --model '" + test::tiny_model() + "' -p 'a cat' --steps 2 --threads 1 --quiet "
                    "--init-latents '" + lat + "' -o '" + d.str() + "/b.png'");
  ASSERT_EQ(r2.status, 0) << r2.out;
  EXPECT_EQ(bytes_of(d.str() + "/a.png"), bytes_of(d.str() + "/b.png"));
  auto r3 = run_cli(tiny_gen("--seed 6 --quiet -o '" + d.str() + "/c.png'"));
  ASSERT_EQ(r3.status, 0) << r3.out;
  EXPECT_NE(read_png(d.str() + "/a.png").rgb, read_png(d.str() + "/c.png").rgb);
}

// --seed -1 (and -s -1) is random, as in stable-diffusion.cpp and A1111: the seed drawn is printed and recorded.
TEST(CliGenerate, SeedMinusOneIsRandom) {
  TempDir d;
  std::vector<std::string> seeds;
  for (const char* flag : {"--seed -1", "-s -1"}) {
    auto r = run_cli(tiny_gen(std::string(flag) + " -o '" + d.str() + "/r.png'"));
    ASSERT_EQ(r.status, 0) << r.out;
    const size_t at = r.out.find("seed: ");
    ASSERT_NE(at, std::string::npos) << r.out;
    seeds.push_back(r.out.substr(at + 6, r.out.find('\n', at) - at - 6));
    EXPECT_NE(seeds.back(), "18446744073709551615");
    EXPECT_NE(read_png(d.str() + "/r.png").text["parameters"].find("Seed: " + seeds.back() + ","), std::string::npos);
  }
  EXPECT_NE(seeds[0], seeds[1]);
  auto big = run_cli(tiny_gen("--seed 18446744073709551615 --quiet -o '" + d.str() + "/b.png'"));
  EXPECT_EQ(big.status, 0) << big.out;  // the largest seed is a seed
}

// Latents saved from seed 5 and replayed: the PNG records seed 5, the seed that drew them.
TEST(CliGenerate, InitLatentsRecordTheirOwnSeed) {
  TempDir d;
  const std::string lat = d.str() + "/noise.safetensors";
  ASSERT_EQ(run_cli(tiny_gen("--seed 5 --quiet --save-latents '" + lat + "' -o '" + d.str() + "/a.png'")).status, 0);
  auto r = run_cli(tiny_gen("--quiet --init-latents '" + lat + "' -o '" + d.str() + "/b.png'"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(read_png(d.str() + "/b.png").text["parameters"].find("Seed: 5,"), std::string::npos);
  auto other = run_cli(tiny_gen("--seed 6 --quiet --init-latents '" + lat + "' -o '" + d.str() + "/c.png'"));
  EXPECT_NE(other.status, 0);
  EXPECT_NE(other.out.find("was drawn from seed 5"), std::string::npos) << other.out;
  // Noise from a file that records no seed: no seed anywhere (PNG chunks, stderr, the JSON done record), not the
  // random seed -1 would otherwise draw.
  const std::string bare = d.str() + "/bare.safetensors";
  save_safetensors(bare, {{"latents", SafeTensorsFile::open(lat)->tensor("latents").to_f32().clone()}});
  auto n = run_cli(tiny_gen("--seed -1 --init-latents '" + bare + "' -o '" + d.str() + "/n.png'"));
  ASSERT_EQ(n.status, 0) << n.out;
  EXPECT_EQ(n.out.find("seed"), std::string::npos) << n.out;
  PngImage png = read_png(d.str() + "/n.png");
  EXPECT_EQ(png.text["parameters"].find("Seed"), std::string::npos) << png.text["parameters"];
  EXPECT_TRUE(nlohmann::json::parse(png.text["ernie-image"])["seed"].is_null()) << png.text["ernie-image"];
  auto js = run_cli(tiny_gen("--progress json --init-latents '" + bare + "' -o '" + d.str() + "/m.png'"));
  ASSERT_EQ(js.status, 0) << js.out;
  const size_t last = js.out.rfind('\n', js.out.size() - 2);  // the done record, the last line
  EXPECT_TRUE(nlohmann::json::parse(js.out.substr(last + 1))["images"][0]["seed"].is_null()) << js.out;
}

namespace {

// stdout and stderr to files of `d` (stderr is then not a terminal: `auto` progress prints plain lines).
struct SplitRun {
  int status = -1;
  std::string out, err;
};
SplitRun run_split(const std::string& args, const TempDir& d) {
  const std::string o = d.str() + "/stdout.txt", e = d.str() + "/stderr.txt";
  int st = std::system((std::string(ERNIE_CLI) + " " + args + " >'" + o + "' 2>'" + e + "'").c_str());
  auto text = [](const std::string& p) { std::vector<char> b = bytes_of(p); return std::string(b.begin(), b.end()); };
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, text(o), text(e)};
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

}  // namespace

TEST(CliGenerate, PlainProgressLinesWhenStderrIsAFile) {
  TempDir d;
  auto r = run_split("generate --model '" + test::tiny_model() + "' -p 'a cat' -W 16 -H 16 --steps 3 --threads 1 "
                     "-o '" + d.str() + "/a.png'", d);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, d.str() + "/a.png\n");
  EXPECT_EQ(r.err.find('\r'), std::string::npos) << r.err;  // no bar redrawn in place
  std::vector<std::string> denoise;
  for (const std::string& l : lines_of(r.err))
    if (l.rfind("denoise ", 0) == 0) denoise.push_back(l.substr(0, l.find(" [")));
  EXPECT_EQ(denoise, (std::vector<std::string>{"denoise 1/3", "denoise 2/3", "denoise 3/3"})) << r.err;
  for (const char* want : {"\nload 1/1 [", "\nencode ", "\ndecode 1/1 [", "]\n", "\nseed: "})
    EXPECT_NE(("\n" + r.err).find(want), std::string::npos) << want << " in\n" << r.err;
}

// --progress json: JSON lines only, on stdout, ending with the done record; nothing on stderr.
TEST(CliGenerate, ProgressJsonLines) {
  TempDir d;
  const std::string out = d.str() + "/a.png";
  auto r = run_split(tiny_gen("--progress json --seed 5 -o '" + out + "'"), d);
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(r.err, "");
  std::vector<nlohmann::json> events;
  for (const std::string& line : lines_of(r.out)) {
    ASSERT_TRUE(nlohmann::json::accept(line)) << line;
    events.push_back(nlohmann::json::parse(line));
  }
  ASSERT_FALSE(events.empty());
  std::vector<std::string> phases;
  int denoise_last = -1;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const nlohmann::json& j = events[i];
    ASSERT_EQ(j["event"], "progress") << j;
    std::string ph = j["phase"];
    if (phases.empty() || phases.back() != ph) phases.push_back(ph);
    if (ph == "denoise") denoise_last = j["step"];
  }
  // The CLI offloads the text encoder: it loads for the encoding, the denoiser after it.
  EXPECT_EQ(phases, (std::vector<std::string>{"load", "encode", "load", "denoise", "decode"})) << r.out;
  EXPECT_EQ(denoise_last, 2);
  const nlohmann::json& done = events.back();
  EXPECT_EQ(done["event"], "done") << done;
  ASSERT_EQ(done["images"].size(), 1u) << done;
  EXPECT_EQ(done["images"][0]["path"], out);
  EXPECT_EQ(done["images"][0]["seed"], 5);
  EXPECT_TRUE(done["timings"]["denoise_s"].is_number()) << done;
  EXPECT_TRUE(fs::exists(out));
}

TEST(CliGenerate, ProgressJsonBatchRecordsEachSeed) {
  TempDir d;
  for (const char* rng : {"ernie", "cpu"}) {
    auto r = run_split(tiny_gen(std::string("--progress json --batch 2 --rng ") + rng + " -o '" + d.str() +
                                "/b_%d.png'"), d);  // a random seed
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_EQ(r.err, "");
    nlohmann::json done = nlohmann::json::parse(lines_of(r.out).back());
    ASSERT_EQ(done["images"].size(), 2u) << done;
    EXPECT_EQ(done["images"][1]["path"], d.str() + "/b_1.png");
    // ernie: image i is seed + i; torch's generators draw the batch at once: one seed for both
    EXPECT_EQ(done["images"][1]["seed"].get<uint64_t>(),
              done["images"][0]["seed"].get<uint64_t>() + (std::string(rng) == "ernie" ? 1 : 0)) << rng;
  }
}

TEST(CliGenerate, ProgressJsonError) {
  TempDir d;
  auto r = run_split("generate --model '" + d.str() + "/nomodel' -p 'a cat' --progress json -o '" + d.str() + "/x.png'", d);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "");
  std::vector<std::string> l = lines_of(r.out);
  ASSERT_EQ(l.size(), 1u) << r.out;
  nlohmann::json j = nlohmann::json::parse(l[0]);
  EXPECT_EQ(j["event"], "error");
  EXPECT_NE(j["message"].get<std::string>().find("model folder not found"), std::string::npos) << j;
}

// A malformed command line fails as JSON too when it asks for JSON lines: the parser's error (with its "did you
// mean") is one error record on stdout, nothing on stderr, and the parser's non-zero status.
TEST(CliGenerate, ProgressJsonParseErrors) {
  TempDir d;
  for (const auto& [args, want] : std::vector<std::pair<std::string, std::string>>{
           {"--progress json --stpes 3", "generate has no flag --stpes; did you mean --steps?"},
           {"--progress=json --batch many", "Could not convert: --batch = many"}}) {
    auto r = run_split(tiny_gen(args + " -o '" + d.str() + "/x.png'"), d);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_EQ(r.err, "") << args;
    std::vector<std::string> l = lines_of(r.out);
    ASSERT_EQ(l.size(), 1u) << args << ": " << r.out;
    ASSERT_TRUE(nlohmann::json::accept(l[0])) << l[0];
    nlohmann::json j = nlohmann::json::parse(l[0]);
    EXPECT_EQ(j["event"], "error") << j;
    EXPECT_NE(j["message"].get<std::string>().find(want), std::string::npos) << j;
  }
}

struct BadCase {
  std::string name, args, message;
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class CliBadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(CliBadInput, FailsWithMessageAndWritesNothing) {
  TempDir d;
  std::string args = GetParam().args;
  for (size_t p; (p = args.find("{D}")) != std::string::npos;) args.replace(p, 3, d.str());
  for (size_t p; (p = args.find("{M}")) != std::string::npos;) args.replace(p, 3, test::tiny_model());
  if (args.find("{L}") != std::string::npos) {  // a latents file for a 16x16 image
    std::string lat = d.str() + "/lat/wrong.safetensors";
    fs::create_directories(d.path / "lat");
    save_safetensors(lat, {{"latents", Tensor::zeros({1, 32, 4, 4}, DType::F32)}});
    args.replace(args.find("{L}"), 3, lat);
  }
  auto r = run_cli(args);
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find(GetParam().message), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("denoise"), std::string::npos) << "compute started: " << r.out;
  EXPECT_EQ(files_in(d), 0u);
}

const std::string kGen = "generate --model '{M}' -p 'a cat' --steps 2 --progress json ";

INSTANTIATE_TEST_SUITE_P(
    Cases, CliBadInput,
    ::testing::Values(
        BadCase{"size_not_multiple", kGen + "-W 18 -H 16 -o '{D}/x.png'", "width 18 is not a multiple of 4"},
        BadCase{"too_wide", kGen + "-W 8192 -H 16 -o '{D}/x.png'", "limit of 4096 pixels per side"},
        BadCase{"too_many_pixels", kGen + "-W 4096 -H 4096 -o '{D}/x.png'", "pixels per image"},
        BadCase{"zero_width", kGen + "-W 0 -H 16 -o '{D}/x.png'", "width 0 must be positive"},
        BadCase{"zero_batch", kGen + "-W 16 -H 16 --batch 0 -o '{D}/x.png'", "number of images 0"},
        BadCase{"zero_steps", "generate --model '{M}' -p 'a cat' -W 16 -H 16 --steps 0 -o '{D}/x.png'",
                "steps 0 must be at least 1"},
        BadCase{"negative_cfg", kGen + "-W 16 -H 16 --cfg -2 -o '{D}/x.png'", "must not be negative"},
        BadCase{"missing_folder", kGen + "-W 16 -H 16 -o '{D}/no/such/dir/x.png'", "does not exist"},
        BadCase{"not_an_image_name", kGen + "-W 16 -H 16 -o '{D}/x.gif'", "must be a .png, .jpg, .jpeg or .webp file"},
        BadCase{"bad_pattern", kGen + "-W 16 -H 16 --batch 2 -o '{D}/x_%s.png'", "only %d"},
        BadCase{"bad_latents_path", kGen + "-W 16 -H 16 --save-latents '{D}/nodir/l.safetensors' -o '{D}/x.png'",
                "does not exist"},
        BadCase{"missing_model", "generate --model '{D}/nomodel' -p 'a cat' -W 16 -H 16 -o '{D}/x.png'",
                "model folder not found"},
        BadCase{"seed_too_large", kGen + "-W 16 -H 16 --seed 18446744073709551616 -o '{D}/x.png'", "out of range"},
        BadCase{"seed_negative", kGen + "-W 16 -H 16 --seed -2 -o '{D}/x.png'", "a seed is -1 (random) or"},
        BadCase{"seed_not_a_number", kGen + "-W 16 -H 16 --seed 12abc -o '{D}/x.png'", "a seed is -1 (random) or"},
        BadCase{"seed_with_latents", kGen + "-W 16 -H 16 --seed 7 --init-latents '{L}' -o '{D}/x.png'",
                "not from a seed; leave --seed out"},
        BadCase{"init_latents_shape", kGen + "-W 32 -H 16 --init-latents '{L}' -o '{D}/x.png'",
                "does not match [1, 32, 4, 8]"},
        BadCase{"init_latents_missing", kGen + "-W 16 -H 16 --init-latents '{D}/none.safetensors' -o '{D}/x.png'",
                "none.safetensors"},
        BadCase{"bad_utf8", "generate --model '{M}' -p \"$(printf 'a \\377')\" -W 16 -H 16 --progress json -o '{D}/x.png'",
                "prompt is not valid UTF-8"},
        BadCase{"bad_dtype", kGen + "-W 16 -H 16 --dtype f64 -o '{D}/x.png'", "unknown type 'f64'"},
        BadCase{"bad_quantize", kGen + "-W 16 -H 16 --quantize fp4 -o '{D}/x.png'", "--quantize: unknown format 'fp4'"},
        BadCase{"bad_attention", kGen + "-W 16 -H 16 --attention fp16 -o '{D}/x.png'", "--attention: unknown precision 'fp16'"},
        BadCase{"bad_lora_apply", kGen + "-W 16 -H 16 --lora-apply-mode later -o '{D}/x.png'",
                "--lora-apply-mode: unknown mode 'later'"},
        BadCase{"bad_device", kGen + "-W 16 -H 16 --device tpu -o '{D}/x.png'", "tpu"},
        BadCase{"bad_vae_tile", kGen + "-W 16 -H 16 --vae-tiling --vae-tile 3 -o '{D}/x.png'",
                "--vae-tile 3 must be a positive multiple of the VAE's 2"},
        BadCase{"zero_vae_tile", kGen + "-W 16 -H 16 --vae-tile 0 -o '{D}/x.png'", "--vae-tile 0 must be a positive"},
        BadCase{"bad_sampler", kGen + "-W 16 -H 16 --sampler lms -o '{D}/x.png'",
                "--sampler 'lms' is not a sampler this engine has; choose one of euler, dpmpp_2m (dpm++2m), unipc"},
        BadCase{"bad_sampling_method", kGen + "-W 16 -H 16 --sampling-method euler_a -o '{D}/x.png'",
                "--sampler 'euler_a' is not a sampler"},
        BadCase{"shift_nan", kGen + "-W 16 -H 16 --shift nan -o '{D}/x.png'", "--shift nan must be a positive number"},
        BadCase{"shift_negative", kGen + "-W 16 -H 16 --shift -3 -o '{D}/x.png'", "must be a positive number"},
        BadCase{"shift_zero", kGen + "-W 16 -H 16 --flow-shift 0 -o '{D}/x.png'", "must be a positive number"},
        BadCase{"bad_rng", kGen + "-W 16 -H 16 --rng philox -o '{D}/x.png'",
                "--rng 'philox' is not a noise generator; choose one of cpu"},
        BadCase{"bad_final_latents_path", kGen + "-W 16 -H 16 --save-final-latents '{D}/nodir/f.safetensors' "
                "-o '{D}/x.png'", "does not exist"}),
    [](const auto& info) { return info.param.name; });

// --vae-tiling: a 32x32 image (16x16 latent) in 16-pixel tiles (2x2) gives the untiled image's pixels
// (the tiled decode matches to float rounding: tests/test_vae_tiling.cpp), and the metadata says so.
TEST(CliGenerate, VaeTilingGivesTheSameImage) {
  TempDir d;
  const std::string base = "generate --model '" + test::tiny_model() + "' -p 'a cat' -W 32 -H 32 --steps 1 --seed 4 "
                           "--threads 1 ";
  auto r = run_cli(base + "-o '" + d.str() + "/a.png'");
  ASSERT_EQ(r.status, 0) << r.out;
  r = run_cli(base + "--vae-tiling --vae-tile 16 -o '" + d.str() + "/b.png'");
  ASSERT_EQ(r.status, 0) << r.out;
  PngImage a = read_png(d.str() + "/a.png"), b = read_png(d.str() + "/b.png");
  ASSERT_EQ(a.rgb.size(), b.rgb.size());
  int worst = 0;
  for (size_t i = 0; i < a.rgb.size(); ++i) worst = std::max(worst, std::abs(int(a.rgb[i]) - int(b.rgb[i])));
  EXPECT_LE(worst, 1);
  EXPECT_FALSE(nlohmann::json::parse(a.text["ernie-image"]).contains("vae_tiled"));
  EXPECT_EQ(nlohmann::json::parse(b.text["ernie-image"])["vae_tiled"], true);
  EXPECT_NE(b.text["parameters"].find("VAE tiling: true"), std::string::npos) << b.text["parameters"];
}

// Round trip through an fp8 file (every block quantized: the tiny DiT has only the first and last): the
// image stays close to the folder's, and the metadata says which weights ran (and that `--attention fp8`,
// which needs a Hopper GPU, did not run on the CPU).
TEST(CliGenerate, Fp8ConvertedFileGivesANearbyImage) {
  TempDir d;
  auto c = run_cli("convert --model '" + test::tiny_model() + "' -o '" + d.str() + "/fp8.safetensors' --dtype fp8 "
                   "--quantize-all-blocks --no-pe --quiet");
  ASSERT_EQ(c.status, 0) << c.out;
  const std::string args = " -p 'a cat' -W 32 -H 32 --steps 2 --seed 4 --threads 1 ";
  auto r = run_cli("generate --model '" + test::tiny_model() + "'" + args + "-o '" + d.str() + "/a.png'");
  ASSERT_EQ(r.status, 0) << r.out;
  r = run_cli("generate --model '" + d.str() + "/fp8.safetensors'" + args + "--attention fp8 -o '" + d.str() + "/b.png'");
  ASSERT_EQ(r.status, 0) << r.out;
  PngImage a = read_png(d.str() + "/a.png"), b = read_png(d.str() + "/b.png");
  ASSERT_EQ(a.rgb.size(), b.rgb.size());
  double sum = 0;
  for (size_t i = 0; i < a.rgb.size(); ++i) sum += std::abs(int(a.rgb[i]) - int(b.rgb[i]));
  const double mean = sum / double(a.rgb.size());
  std::printf("fp8 file vs folder: mean |diff| %.3f of 255\n", mean);
  EXPECT_GT(mean, 0.0);  // the weights did change
  EXPECT_LT(mean, 4.0);
  EXPECT_FALSE(nlohmann::json::parse(a.text["ernie-image"]).contains("dit_weights"));
  EXPECT_EQ(nlohmann::json::parse(b.text["ernie-image"])["dit_weights"], "fp8");
  EXPECT_NE(b.text["parameters"].find("DiT weights: fp8"), std::string::npos) << b.text["parameters"];
  EXPECT_FALSE(nlohmann::json::parse(b.text["ernie-image"]).contains("attention"));
  EXPECT_EQ(b.text["parameters"].find("Attention"), std::string::npos) << b.text["parameters"];
}

// The unwritable-output case needs a read-only folder (root ignores permissions: skip then).
TEST(CliGenerate, UnwritableFolderFailsBeforeCompute) {
  if (::geteuid() == 0) GTEST_SKIP() << "root can write anywhere";
  TempDir d;
  fs::create_directories(d.path / "ro");
  fs::permissions(d.path / "ro", fs::perms::owner_read | fs::perms::owner_exec);
  auto r = run_cli("generate --model '" + test::tiny_model() +
                   "' -p 'a cat' -W 16 -H 16 --steps 2 --progress json -o '" + d.str() + "/ro/x.png'");
  fs::permissions(d.path / "ro", fs::perms::owner_all);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("not writable"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("denoise"), std::string::npos) << r.out;
}

TEST(CliGenerate, OutputThatIsAFolderFails) {
  TempDir d;
  fs::create_directories(d.path / "x.png");
  auto r = run_cli(tiny_gen("--progress json -o '" + d.str() + "/x.png'"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("is a folder"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("denoise"), std::string::npos) << r.out;
}

// Issue 45 item 6: -o onto a character device (one made with mknod where allowed, else /dev/null through a
// symlink) is refused before anything is computed, and the node stays as it was.
TEST(CliGenerate, OutputOntoACharacterDeviceIsRefused) {
  TempDir d;
  const std::string node = d.str() + "/out.png";
  const bool own = ::mknod(node.c_str(), S_IFCHR | 0666, makedev(1, 7)) == 0;  // /dev/full's numbers
  if (!own) fs::create_symlink("/dev/null", node);
  struct stat before {};
  ASSERT_EQ(::stat(node.c_str(), &before), 0);
  ASSERT_TRUE(S_ISCHR(before.st_mode));
  auto r = run_cli(tiny_gen("--progress json -o '" + node + "'"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("is a character device, not a regular file"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("denoise"), std::string::npos) << r.out;
  struct stat after {};
  ASSERT_EQ(::lstat(node.c_str(), &after), 0);
  EXPECT_EQ(own ? S_ISCHR(after.st_mode) : S_ISLNK(after.st_mode), true);
  ASSERT_EQ(::stat(node.c_str(), &after), 0);
  EXPECT_TRUE(S_ISCHR(after.st_mode));
  EXPECT_EQ(after.st_rdev, before.st_rdev);
  EXPECT_EQ(files_in(d), size_t(0));  // no temp file either
}

// An output that is one of the inputs (--init-img, --mask, --init-latents), by name, symlink or hard link, is
// refused before anything is computed, and the input is unchanged.
TEST(CliGenerate, OutputOntoAnInputIsRefused) {
  TempDir d;
  const std::string init = d.str() + "/init.png";
  write_png(init, 16, 16, std::vector<uint8_t>(16 * 16 * 3, 90));
  fs::create_symlink(init, d.path / "link.png");
  fs::create_hard_link(init, d.path / "hard.png");
  const std::vector<char> bytes = bytes_of(init);
  for (const std::string& args : {"-i '" + init + "' -o '" + init + "'", "-i '" + init + "' -o '" + d.str() + "/link.png'",
                                  "-i '" + init + "' -o '" + d.str() + "/hard.png'",
                                  "-i '" + init + "' --mask '" + d.str() + "/hard.png' -o '" + d.str() + "/link.png'"}) {
    auto r = run_cli(tiny_gen("--progress json --strength 0.5 " + args));
    EXPECT_NE(r.status, 0) << args;
    EXPECT_NE(r.out.find("resolves to the input file"), std::string::npos) << args << ": " << r.out;
    EXPECT_EQ(r.out.find("denoise"), std::string::npos) << r.out;
    EXPECT_EQ(bytes_of(init), bytes);
  }
  const std::string lat = d.str() + "/noise.safetensors";
  ASSERT_EQ(run_cli(tiny_gen("-q --seed 3 -o '" + d.str() + "/a.png' --save-latents '" + lat + "'")).status, 0);
  const std::vector<char> lat_bytes = bytes_of(lat);
  auto r = run_cli(tiny_gen("-q --init-latents '" + lat + "' -o '" + d.str() + "/b.png' --save-latents '" + lat + "'"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("resolves to the input file"), std::string::npos) << r.out;
  EXPECT_EQ(bytes_of(lat), lat_bytes);
}

// Issue 45 item 5: symlinks planted at the names the old writers used (`<out>.tmp<pid>`, `<out>.tmp-<pid>`) for
// the next 3,000 pids, and at random-looking `<out>.tmp.<hex>` names, all pointing at a victim: generate and
// convert write their outputs and the victim is unchanged.
TEST(CliGenerate, PlantedTempSymlinksLeaveTheVictimUnchanged) {
  TempDir d;
  const fs::path victim = d.path / "victim.txt";
  { std::ofstream(victim) << "precious"; }
  const pid_t me = ::getpid();
  for (const char* out : {"out.png", "out.gguf"})
    for (int k = 0; k < 3000; ++k) {
      const std::string pid = std::to_string(me + k);
      fs::create_symlink(victim, d.path / (std::string(out) + ".tmp" + pid));
      fs::create_symlink(victim, d.path / (std::string(out) + ".tmp-" + pid));
      char hex[32];
      std::snprintf(hex, sizeof hex, ".tmp.%012llx", (unsigned long long)(uint64_t(k) * 0x9E3779B97F4Aull & 0xffffffffffffull));
      fs::create_symlink(victim, d.path / (std::string(out) + hex));
    }
  auto g = run_cli(tiny_gen("-q -o '" + d.str() + "/out.png'"));
  EXPECT_EQ(g.status, 0) << g.out;
  auto c = run_cli("convert -q --model '" + test::tiny_model() + "' --dtype q8_0 -o '" + d.str() + "/out.gguf'");
  EXPECT_EQ(c.status, 0) << c.out;
  const std::vector<char> v = bytes_of(victim.string());
  EXPECT_EQ(std::string(v.begin(), v.end()), "precious");
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(d.path / "out.png")));
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(d.path / "out.gguf")));
  size_t plain = 0;  // the victim and the two outputs: no temp file left
  for (auto& e : fs::directory_iterator(d.path)) plain += fs::is_regular_file(e.symlink_status());
  EXPECT_EQ(plain, size_t(3));
}

TEST(CliGenerate, CorruptModelFileFails) {
  TempDir d;
  fs::copy(test::tiny_model(), d.path / "model", fs::copy_options::recursive);
  for (auto& e : fs::directory_iterator(d.path / "model" / "transformer"))
    if (e.path().extension() == ".safetensors") fs::resize_file(e.path(), fs::file_size(e.path()) / 2);
  auto r = run_cli("generate --model '" + d.str() + "/model' -p 'a cat' -W 16 -H 16 --steps 2 -o '" + d.str() + "/x.png'");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("transformer"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(d.path / "x.png"));
}

TEST(CliEncode, WritesHiddenMatchingGolden) {
  TempDir d;
  std::string out = d.str() + "/e.safetensors";
  auto r = run_cli("encode --model '" + test::tiny_model() + "' -p 'a cat' -o '" + out + "'");
  ASSERT_EQ(r.status, 0) << r.out;
  auto f = SafeTensorsFile::open(out);
  EXPECT_TRUE(test::tensors_close(f->tensor("hidden"), test::golden_tensor("te.0.hidden"), test::kCpuRelL2));
  auto bad = run_cli("encode --model '" + test::tiny_model() + "' -p 'a cat' -o '" + d.str() + "/e.bin'");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("must be a .safetensors file"), std::string::npos) << bad.out;
}

// What the first users hit (issue 26): messages that name the problem.
TEST(CliMessages, NotAModel) {
  TempDir d;
  const std::string png = d.str() + "/x.png";
  ASSERT_EQ(run_cli(tiny_gen("--quiet -o '" + png + "'")).status, 0);
  auto r = run_cli("generate --model '" + png + "' -p x -o '" + d.str() + "/y.png'");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("a PNG image, not a model"), std::string::npos) << r.out;
}

TEST(CliMessages, DidYouMean) {
  auto r = run_cli("genrate --model x -p y");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("error: unknown command 'genrate'; did you mean 'generate'?"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\ncommands: generate, encode, enhance, serve"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("random-model"), std::string::npos) << r.out;  // hidden
  EXPECT_EQ(r.out.find("A subcommand is required"), std::string::npos) << r.out;
  for (const char* none : {"", "--model x"}) {  // no command at all: the list, not CLI11's bare line
    r = run_cli(none);
    EXPECT_NE(r.status, 0) << none;
    EXPECT_NE(r.out.find("error: a command is required\ncommands: generate, encode"), std::string::npos) << r.out;
  }
  r = run_cli(tiny_gen("--stpes 3 -o /tmp/never.png"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("did you mean --steps"), std::string::npos) << r.out;
}

TEST(CliMessages, NegativePromptWithoutGuidance) {
  TempDir d;
  auto r = run_cli(tiny_gen("-n blurry --cfg 1 -o '" + d.str() + "/a.png'"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("negative prompt is ignored at cfg 1"), std::string::npos) << r.out;
  EXPECT_EQ(read_png(d.str() + "/a.png").text["parameters"].find("Negative prompt"), std::string::npos);
}

TEST(CliMessages, LongPromptIsCutWithAWarning) {
  TempDir d;
  std::string prompt;
  for (int i = 0; i < 2100; ++i) prompt += "cat ";
  auto r = run_cli("generate --model '" + test::tiny_model() + "' -p '" + prompt + "' -W 16 -H 16 --steps 1 "
                   "--threads 1 -o '" + d.str() + "/a.png'");
  ASSERT_EQ(r.status, 0) << r.out.substr(0, 400);
  EXPECT_NE(r.out.find("warning: the prompt was cut to the tokenizer's limit"), std::string::npos)
      << r.out.substr(r.out.size() > 400 ? r.out.size() - 400 : 0);
  // --progress json: a warning record, and truncated: true in the done record (as the HTTP API's response)
  auto j = run_cli("generate --model '" + test::tiny_model() + "' -p '" + prompt + "' -W 16 -H 16 --steps 1 "
                   "--threads 1 --progress json -o '" + d.str() + "/b.png'");
  ASSERT_EQ(j.status, 0) << j.out.substr(0, 400);
  const size_t last = j.out.rfind('\n', j.out.size() - 2);
  const nlohmann::json done = nlohmann::json::parse(j.out.substr(last + 1));
  EXPECT_EQ(done["truncated"], true) << done;
  EXPECT_NE(j.out.find("{\"event\":\"warning\",\"message\":\"the prompt was cut"), std::string::npos);
}

TEST(CliMessages, DecodeOutOfVocabulary) {
  auto r = run_cli("tokenize --model '" + test::tiny_model() + "' --decode --text '[1, 99999999]'");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("id 99999999 is not in the vocabulary"), std::string::npos) << r.out;
}

// stable-diffusion.cpp's spellings work as aliases.
TEST(CliMessages, StableDiffusionCppAliases) {
  TempDir d;
  auto a = run_cli("generate --model '" + test::tiny_model() + "' -p 'a cat' -W 16 -H 16 --steps 2 -t 1 --cfg-scale 2 "
                   "-b 2 --negative-prompt blurry -s 3 --sampling-method euler --quiet -o '" + d.str() + "/a_%d.png'");
  ASSERT_EQ(a.status, 0) << a.out;
  auto b = run_cli(tiny_gen("--cfg 2 --batch 2 -n blurry --seed 3 --quiet -o '" + d.str() + "/b_%d.png'"));
  ASSERT_EQ(b.status, 0) << b.out;
  EXPECT_EQ(bytes_of(d.str() + "/a_1.png"), bytes_of(d.str() + "/b_1.png"));
}

// `bench --device cpu` takes the CPU's dtype by itself (it demanded --dtype f32).
TEST(CliMessages, BenchOnTheCpuNeedsNoDtype) {
  auto r = run_cli("bench --model '" + test::tiny_model() + "' --device cpu -W 64 -H 64 --steps 1 --repeat 1 "
                   "--prompt-tokens 8 --threads 1 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\"dtype\": \"f32\""), std::string::npos) << r.out;
}

// `ernie-image --version` prints the CMake project version, the commit (in a git checkout) and whether CUDA is
// built in; -v/--verbose prints the resolved settings.
TEST(CliMessages, VersionAndVerbose) {
  auto v = run_cli("--version");
  EXPECT_EQ(v.status, 0);
  EXPECT_EQ(v.out.rfind(std::string("ernie-image ") + ERNIE_VERSION + " (", 0), 0u) << v.out;
  EXPECT_NE(v.out.find(ernie::ops::cuda_built() ? "CUDA built in)\n" : "CPU only: built without CUDA)\n"),
            std::string::npos) << v.out;
  if (std::system("git -C '" ERNIE_TEST_DATA "' rev-parse HEAD >/dev/null 2>&1") == 0) {
    EXPECT_NE(v.out.find("(commit "), std::string::npos) << v.out;
  }
  TempDir d;
  auto r = run_cli(tiny_gen("-v --seed 7 -o '" + d.str() + "/a.png'"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("device cpu, dtype F32, offload "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("16x16, 2 steps, cfg 4, sampler euler, shift 4, 1 image(s), seed 7, rng cpu"), std::string::npos) << r.out;
  EXPECT_EQ(run_cli(tiny_gen("--verbose --quiet --seed 7 -o '" + d.str() + "/b.png'")).out, "");
}

// A seed that is not -1 or a 64-bit integer is an error before anything loads, naming the flag.
TEST(CliMessages, BadSeeds) {
  for (const char* s : {"-2", "1.5", "abc", "18446744073709551616", "123456789012345678901234"}) {
    auto r = run_cli(tiny_gen(std::string("--seed ") + s + " -o /tmp/never.png"));
    EXPECT_EQ(r.status, 1) << s;
    EXPECT_NE(r.out.find("error: --seed"), std::string::npos) << r.out;
  }
}

// --sampler and --shift reach the PNG metadata (A1111 names), and change the image.
TEST(CliGenerate, SamplerAndShiftInMetadata) {
  TempDir d;
  ASSERT_EQ(run_cli(tiny_gen("--seed 3 --quiet -o '" + d.str() + "/e.png'")).status, 0);
  auto r = run_cli(tiny_gen("--seed 3 --quiet --sampling-method dpm++2m --flow-shift 3 -o '" + d.str() + "/d.png'"));
  ASSERT_EQ(r.status, 0) << r.out;
  auto u = run_cli(tiny_gen("--seed 3 --quiet --sampler unipc -o '" + d.str() + "/u.png'"));
  ASSERT_EQ(u.status, 0) << u.out;
  PngImage e = read_png(d.str() + "/e.png"), dp = read_png(d.str() + "/d.png"), un = read_png(d.str() + "/u.png");
  EXPECT_NE(dp.text["parameters"].find("Sampler: DPM++ 2M, Schedule type: FlowMatch"), std::string::npos)
      << dp.text["parameters"];
  EXPECT_NE(dp.text["parameters"].find(", Shift: 3, RNG: CPU"), std::string::npos) << dp.text["parameters"];
  EXPECT_NE(un.text["parameters"].find("Sampler: UniPC"), std::string::npos);
  EXPECT_NE(e.text["parameters"].find("Sampler: Euler, "), std::string::npos);
  EXPECT_NE(e.text["parameters"].find(", Shift: 4, RNG: CPU"), std::string::npos) << e.text["parameters"];
  auto jd = nlohmann::json::parse(dp.text["ernie-image"]);
  EXPECT_EQ(jd["sampler"], "dpmpp_2m");
  EXPECT_DOUBLE_EQ(jd["shift"].get<double>(), 3.0);
  EXPECT_EQ(jd["rng"], "cpu");
  EXPECT_NE(e.rgb, dp.rgb);
  EXPECT_NE(e.rgb, un.rgb);
}

// --rng cpu (the default) is torch's CPU generator: --save-latents writes torch.randn's values for the seed
// (the golden tensor cpu.42.2x32x6x5.float32 is a 2-image batch of 16x20 images' latents on the tiny model).
TEST(CliGenerate, DefaultNoiseIsTorchCpuRandn) {
  TempDir d;
  const std::string lat = d.str() + "/n.safetensors";
  auto r = run_cli("generate --model '" + test::tiny_model() + "' -p 'a cat' -W 20 -H 24 --steps 1 --batch 2 "
                   "--seed 42 --threads 1 --quiet --save-latents '" + lat + "' -o '" + d.str() + "/x.png'");
  ASSERT_EQ(r.status, 0) << r.out;
  auto f = SafeTensorsFile::open(lat);
  auto g = SafeTensorsFile::open(test::data_dir() + "/torch-rng/torch_rng.safetensors");
  EXPECT_EQ(f->tensor("latents").to_vector(), g->tensor("cpu.42.2x32x6x5.float32").to_vector());
  auto e = run_cli("generate --model '" + test::tiny_model() + "' -p 'a cat' -W 20 -H 24 --steps 1 --batch 2 "
                   "--seed 42 --rng ernie --threads 1 --quiet --save-latents '" + lat + "' -o '" + d.str() + "/x.png'");
  ASSERT_EQ(e.status, 0) << e.out;
  EXPECT_NE(SafeTensorsFile::open(lat)->tensor("latents").to_vector(), g->tensor("cpu.42.2x32x6x5.float32").to_vector());
}

// --save-final-latents: the denoised latents before the VAE, in the --init-latents layout; from the golden
// initial latents with --sampler unipc they are diffusers' UniPC result, and --save-latents still writes the noise.
TEST(CliGenerate, SaveFinalLatentsIsTheDenoisedResult) {
  TempDir d;
  auto g = SafeTensorsFile::open(test::data_dir() + "/samplers-lora/golden2.safetensors");
  const std::string init = d.str() + "/init.safetensors", fin = d.str() + "/final.safetensors",
                    noise = d.str() + "/noise.safetensors";
  save_safetensors(init, {{"latents", g->tensor("samplers.case.1.latents_init")}});
  auto r = run_cli("generate --model '" + test::tiny_model() + "' -p '一只黑白相间的中华田园犬' --steps 4 --cfg 1 "
                   "--threads 1 --quiet --sampler unipc --init-latents '" + init + "' --save-latents '" + noise +
                   "' --save-final-latents '" + fin + "' -o '" + d.str() + "/x.png'");
  ASSERT_EQ(r.status, 0) << r.out;
  Tensor got = SafeTensorsFile::open(fin)->tensor("latents");
  EXPECT_TRUE(test::tensors_close(got, g->tensor("samplers.case.1.unipc.latents_final"), test::kCpuRelL2));
  EXPECT_EQ(SafeTensorsFile::open(noise)->tensor("latents").to_vector(),
            g->tensor("samplers.case.1.latents_init").to_vector());
  // the final latents decode again through --init-latents' layout: same shape as the noise
  EXPECT_EQ(got.shape(), g->tensor("samplers.case.1.latents_init").shape());
}
