// Hostile model files (issue 21): what an attacker's download can put where a config or folder should be. Each
// case failed on the code before it with an abort (uncaught standard exception), a hang or unbounded memory;
// now each is a clear Error, and the CLI exits 1 with a message.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "core/error.h"
#include "core/file.h"
#include "core/json.h"
#include "golden.h"
#include "io/model_folder.h"

namespace fs = std::filesystem;
using namespace ernie;
using ernie::test::error_of;
using ernie::test::TempDir;
using json = nlohmann::json;

namespace {

std::string copy_fixture(const TempDir& d) {
  std::string dst = d.str() + "/model";
  fs::copy(test::tiny_model(), dst, fs::copy_options::recursive);
  for (auto& e : fs::recursive_directory_iterator(dst))
    fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add);
  return dst;
}

void edit_json(const std::string& path, const std::function<void(json&)>& f) {
  std::ifstream in(path);
  json j = json::parse(in);
  in.close();
  f(j);
  std::ofstream(path) << j.dump(2);
}

// The CLI on `model`: exit 1 (never a signal) with `needle` in the message.
void cli_fails_with(const std::string& model, const std::string& needle) {
  const auto r = test::run_cli("doctor --model '" + model + "'", 30);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find(needle), std::string::npos) << r.out;
}

// Files given as --model that are something else are named by their magic, never read as a safetensors header
// ("header length 8.1e17"): issue 26.
TEST(HostileFiles, OtherFilesAsAModelAreNamed) {
  TempDir d;
  const struct {
    const char* name;
    std::string head, want;
  } cases[] = {
      {"x.png", std::string("\x89PNG\r\n\x1a\n", 8), "x.png: a PNG image, not a model"},
      {"x.jpg", "\xff\xd8\xff\xe0", "x.jpg: a JPEG image, not a model"},
      {"x.gif", "GIF89a", "x.gif: a GIF image, not a model"},
      {"x.webp", std::string("RIFF\x10\0\0\0WEBPVP8 ", 16), "x.webp: a WebP image, not a model"},
      {"x.gguf", std::string("GGUF\3\0\0\0", 8), "x.gguf: a GGUF file"},
      {"x.ckpt", "PK\x03\x04", "x.ckpt: a zip archive"},
      {"x.pt", std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20", 10), "x.pt: a Python pickle"},
      {"x.txt", "hello, this is not a model at all", "x.txt: not a safetensors file"},
  };
  for (const auto& c : cases) {
    const std::string path = d.str() + "/" + c.name;
    std::ofstream(path, std::ios::binary) << c.head << std::string(64, 'z');
    const std::string e = error_of([&] { ModelFolder::open(path); });
    EXPECT_NE(e.find(c.want), std::string::npos) << c.name << ": " << e;
    EXPECT_EQ(e.find("header length"), std::string::npos) << c.name << ": " << e;
  }
}

TEST(HostileFiles, FolderWhereAConfigShouldBe) {
  TempDir d;
  const std::string m = copy_fixture(d);
  fs::remove(m + "/transformer/config.json");
  fs::create_directory(m + "/transformer/config.json");
  EXPECT_NE(error_of([&] { ModelFolder::open(m); }).find("not a regular file (it is a folder)"), std::string::npos);
  fs::remove(m + "/model_index.json");
  fs::create_directory(m + "/model_index.json");
  EXPECT_NE(error_of([&] { ModelFolder::open(m); }).find("model_index.json: not a regular file"), std::string::npos);
  const auto r = test::run_cli("generate --model '" + m + "' -p x -W 16 -H 16 --steps 1 -o " + d.str() + "/x.png", 30);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("not a regular file"), std::string::npos) << r.out;
}

TEST(HostileFiles, SymlinkLoops) {
  TempDir d;
  fs::create_symlink(d.str() + "/loop", d.str() + "/loop");
  EXPECT_NE(error_of([&] { ModelFolder::open(d.str() + "/loop"); }).find("symbolic links"), std::string::npos);
  cli_fails_with(d.str() + "/loop", "symbolic links");
  const std::string m = copy_fixture(d);
  fs::remove_all(m + "/vae");
  fs::create_symlink(m + "/vae", m + "/vae");
  EXPECT_FALSE(error_of([&] { ModelFolder::open(m); }).empty());
  const auto r = test::run_cli("doctor --model '" + m + "'", 30);
  EXPECT_EQ(r.status, 1) << r.out;  // an error, not SIGABRT (134)
}

TEST(HostileFiles, FifoAndDeviceAsConfig) {
  TempDir d;
  const std::string m = copy_fixture(d);
  const std::string cfg = m + "/transformer/config.json";
  fs::remove(cfg);
  ASSERT_EQ(::mkfifo(cfg.c_str(), 0644), 0);  // opened blocking, this would wait for a writer forever
  EXPECT_NE(error_of([&] { ModelFolder::open(m); }).find("a device, FIFO or socket"), std::string::npos);
  fs::remove(cfg);
  fs::create_symlink("/dev/zero", cfg);  // read to its end, this would never end
  EXPECT_NE(error_of([&] { ModelFolder::open(m); }).find("not a regular file"), std::string::npos);
  cli_fails_with(m, "not a regular file");
}

TEST(HostileFiles, JsonFilesAreCapped) {
  TempDir d;
  const std::string big = d.str() + "/big.json";
  std::ofstream(big) << "{}";
  fs::resize_file(big, kMaxJsonFileBytes + 1);
  EXPECT_NE(error_of([&] { read_json_file(big); }).find("more than the"), std::string::npos);
}

TEST(HostileFiles, LayerCountsBoundedByTheCheckpoint) {
  TempDir d;
  const std::string m = copy_fixture(d);
  edit_json(m + "/transformer/config.json", [](json& j) { j["num_layers"] = 1073741824; });
  EXPECT_NE(error_of([&] { ModelFolder::open(m); }).find("num_layers = 1073741824, but the checkpoint holds only"),
            std::string::npos);
}

TEST(HostileFiles, TextEncoderLayersBounded) {
  TempDir d;
  const std::string m = copy_fixture(d);
  edit_json(m + "/text_encoder/config.json", [](json& j) {
    json& t = j.contains("text_config") ? j["text_config"] : j;
    t["num_hidden_layers"] = 1 << 30;
  });
  EXPECT_NE(error_of([&] { ModelFolder::open(m); }).find("num_hidden_layers = 1073741824"), std::string::npos);
}

TEST(HostileFiles, ValuesOutOfRange) {
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    const char* needle;
  } cases[] = {
      {"rope_axes_dim past int", [](json& j) { j["rope_axes_dim"] = {4294967304ull, 12, 12}; }, "out of range"},
      {"eps 1e308", [](json& j) { j["eps"] = 1e308; }, "eps must be in (0, 1)"},
      {"negative layers", [](json& j) { j["num_layers"] = -5; }, "out of range"},
      {"a long list", [](json& j) { j["rope_axes_dim"] = std::vector<int>(100, 2); }, "at most 64"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    TempDir d;
    const std::string m = copy_fixture(d);
    edit_json(m + "/transformer/config.json", k.edit);
    EXPECT_NE(error_of([&] { ModelFolder::open(m); }).find(k.needle), std::string::npos)
        << error_of([&] { ModelFolder::open(m); });
  }
}

TEST(HostileFiles, ModelIndexEntriesAreLibraryClassPairs) {
  TempDir d;
  const std::string m = copy_fixture(d);
  edit_json(m + "/model_index.json", [](json& j) { j["transformer"] = 5; });
  EXPECT_NE(error_of([&] { ModelFolder::open(m); }).find("entry 'transformer' = 5 is not [library, class]"),
            std::string::npos);
}

}  // namespace
