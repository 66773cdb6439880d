// `ernie-image doctor`: report contents and exit status, through the real binary.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "golden.h"
#include "doctor/doctor.h"
#include "convert/convert.h"
#include "io/model_folder.h"

using namespace ernie;
using json = nlohmann::json;


TEST(Doctor, ReportsFixture) {
  DoctorReport r = run_doctor(test::tiny_model());
  EXPECT_EQ(r.problems, 0) << r.json.dump(2);
  const json& c = r.json["model"]["components"];
  for (const char* k : {"transformer", "text_encoder", "vae", "pe"}) {
    ASSERT_TRUE(c.contains(k)) << k;
    EXPECT_GT(c[k]["params"].get<size_t>(), 0u);
    EXPECT_EQ(c[k]["dtype"], "BF16");
    EXPECT_GT(c[k]["bytes_on_disk"].get<size_t>(), 0u);
  }
  EXPECT_EQ(c["transformer"]["params"].get<size_t>(), 143456u);
  EXPECT_TRUE(r.json["build"].contains("cuda"));
  EXPECT_TRUE(r.json.contains("gpus"));
}

TEST(Doctor, CliExitStatus) {
  test::CliRun ok = test::run_cli("doctor --model " + test::tiny_model());
  EXPECT_EQ(ok.status, 0) << ok.out;
  EXPECT_NE(ok.out.find("all is well"), std::string::npos) << ok.out;

  test::CliRun js = test::run_cli("doctor --json --model " + test::tiny_model());
  EXPECT_EQ(js.status, 0);
  json j = json::parse(js.out);
  EXPECT_TRUE(j["ok"].get<bool>());

  test::TempDir d;
  test::CliRun bad = test::run_cli("doctor --model " + d.str());
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("problem: "), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("model_index.json"), std::string::npos) << bad.out;
}

// A converted fp8 file: each component's share of the file, and memory planned with its 8-bit weights.
TEST(Doctor, ConvertedFp8File) {
  test::TempDir d;
  const std::string f = d.str() + "/fp8.safetensors";
  ConvertOptions opt;
  opt.format = WeightFormat::FP8;
  opt.policy.keep_first_last_dit_blocks = false;  // the tiny DiT has only two blocks
  convert_model(ModelFolder::open(test::tiny_model()), f, opt);
  DoctorReport r = run_doctor(f);
  EXPECT_EQ(r.problems, 0) << r.json.dump(2);
  EXPECT_EQ(r.json["warnings"].size(), 0u) << r.json.dump(2);  // spec-clean (io/safetensors_spec.h) among others
  EXPECT_EQ(r.json["model"]["spec_clean_files"], 1);
  const json& c = r.json["model"]["components"];
  size_t sum = 0;
  for (const char* k : {"transformer", "text_encoder", "vae", "pe"}) sum += c[k]["bytes_on_disk"].get<size_t>();
  EXPECT_LE(sum, std::filesystem::file_size(f));
  EXPECT_GT(sum, std::filesystem::file_size(f) / 2);
  EXPECT_EQ(c["transformer"]["dtype"], "F8_E4M3");
  const std::string at = r.json["model"]["memory"]["at"].get<std::string>();
  EXPECT_NE(at.find("F8_E4M3 DiT, 8-bit text encoder"), std::string::npos) << at;
}

// doctor reads what generate --pe reads besides tensors: each broken tokenizer, chat template or generation
// config is a problem (and a non-zero exit), never "all is well".
TEST(Doctor, ReportsBrokenTokenizersTemplateAndGenerationConfig) {
  struct Case {
    const char* file;
    std::string contents;
    const char* needle;
  };
  const std::vector<Case> cases = {
      {"tokenizer/tokenizer.json", "{\"model\": 42", "tokenizer/tokenizer.json"},
      {"pe_tokenizer/tokenizer.json", "[]", "pe_tokenizer/tokenizer.json"},
      {"pe_tokenizer/chat_template.jinja", "{% for m in messages %}{{ m['content'] }", "chat template"},
      {"pe_tokenizer/chat_template.jinja", "{{ raise_exception('this template is broken') }}", "this template is broken"},
      {"pe/generation_config.json", "{\"top_k\": 40,", "pe/generation_config.json: not a JSON object"},
      {"pe/generation_config.json", "{\"top_k\": \"many\"}", "top_k must be a non-negative integer"},
  };
  for (const Case& c : cases) {
    test::TempDir d;
    std::filesystem::copy(test::tiny_model(), d.path / "model", std::filesystem::copy_options::recursive);
    const std::string m = (d.path / "model").string();
    std::ofstream(d.path / "model" / c.file, std::ios::binary | std::ios::trunc) << c.contents;
    DoctorReport r = run_doctor(m);
    EXPECT_GT(r.problems, 0) << c.file << ": " << r.json.dump(2);
    EXPECT_NE(r.json["problems"].dump().find(c.needle), std::string::npos) << c.needle << " in " << r.json["problems"];
    EXPECT_FALSE(r.json["ok"].get<bool>());
    // The rest of the report is still there.
    EXPECT_TRUE(r.json["model"].contains("components")) << c.file;
    test::CliRun cli = test::run_cli("doctor --model '" + m + "'");
    EXPECT_NE(cli.status, 0) << cli.out;
    EXPECT_EQ(cli.out.find("all is well"), std::string::npos) << cli.out;
  }
  // The fixture's text side loads: both tokenizers, the rendered template, the generation config.
  DoctorReport ok = run_doctor(test::tiny_model());
  EXPECT_EQ(ok.problems, 0) << ok.json.dump(2);
  const json& t = ok.json["model"]["text"];
  EXPECT_TRUE(t.contains("tokenizer") && t.contains("pe_tokenizer") && t.contains("chat_template") &&
              t.contains("generation_config"))
      << t.dump(2);
}

// A GGUF DiT: doctor names the format, counts the tensors per GGML type, and plans its block linears at their
// stored size (less than the BF16 file's weights on the GPU).
TEST(Doctor, CountsGgufTypesAndPlansBlocksAsStored) {
  const std::string dir = test::data_dir() + "/gguf";
  auto report = [&](const std::string& variant) {
    DoctorOptions o;
    o.files.diffusion_model = dir + "/dit-" + variant + ".gguf";
    return run_doctor(dir + "/tiny256/model", o).json["model"]["components"]["transformer"];
  };
  const json q4 = report("Q4_K"), bf16 = report("BF16");
  EXPECT_EQ(q4["format"], "gguf");
  EXPECT_EQ(q4["types"]["Q4_K"].get<int>(), 19) << q4.dump(2);
  EXPECT_EQ(q4["types"]["F32"].get<int>(), 14) << q4.dump(2);
  EXPECT_LT(q4["gpu_gib"].get<double>(), bf16["gpu_gib"].get<double>() * 0.7);
}
