// convert and the safetensors writer lose nothing: an output onto one of the model's own inputs or onto a
// device, folder or FIFO is refused; the temp file is unique, created exclusively and removed on errors and
// signals; every written file records a data checksum that doctor --verify checks, so a killed write's
// leftover or a damaged file never passes as whole.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "cli.h"
#include "core/error.h"
#include "convert/convert.h"
#include "doctor/doctor.h"
#include "golden.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;
using namespace ernie;
using ernie::test::TempDir;

namespace {
std::string read_all(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
void write_all(const std::string& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary);
  out << s;
}
std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> s;
  for (auto& e : fs::directory_iterator(dir)) s.insert(e.path().filename().string());
  return s;
}
std::string joined(const std::set<std::string>& s) {
  std::string j;
  for (auto& n : s) j += n + " ";
  return j;
}
// A copy of the tiny model folder, free to damage.
std::string copy_tiny(const TempDir& d) {
  fs::copy(test::tiny_model(), d.path / "model", fs::copy_options::recursive);
  return (d.path / "model").string();
}
// Tensors of 1000 zeros made without OpenMP (some run in a forked child); `at_5` runs when tensor 5 is made.
std::vector<PendingTensor> pending(int n, std::function<void()> at_5 = {}) {
  std::vector<PendingTensor> ts;
  for (int i = 0; i < n; ++i)
    ts.push_back({"t" + std::to_string(i), DType::F32, {1000}, [i, at_5] {
                    if (i == 5 && at_5) at_5();
                    return Tensor::from_vector(std::vector<float>(1000, float(i)), {1000});
                  }});
  return ts;
}
// Runs save_safetensors_streamed(out, pending(8, raise sig at tensor 5)) in a child; its wait status.
int write_killed_by(const std::string& out, int sig) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(sig, SIG_DFL);  // whatever the test runner left
    try {
      save_safetensors_streamed(out, pending(8, [sig] { ::raise(sig); }), {}, 64, {}, 1);
    } catch (...) {
    }
    ::_exit(0);  // only when the signal did not end the process
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  return st;
}
}  // namespace

TEST(ConvertSafety, RefusesToWriteOntoItsOwnInputs) {
  TempDir d;
  const std::string m = copy_tiny(d);
  const ModelFolder mf = ModelFolder::open(m);
  const std::string shard = m + "/transformer/diffusion_pytorch_model.safetensors";
  const std::string before = read_all(shard);
  for (const std::string& out :
       {shard, m + "/transformer/../transformer/diffusion_pytorch_model.safetensors", m + "/pe/model.safetensors",
        m + "/tokenizer/tokenizer.json", m + "/pe_tokenizer/chat_template.jinja", m + "/model_index.json",
        m + "/pe/generation_config.json", m + "/scheduler/scheduler_config.json"})
    test::expect_error([&] { convert_model(mf, out, {}); }, "the model's own input file");
  // Through a symlink and a hard link.
  fs::create_symlink(shard, d.path / "link.safetensors");
  test::expect_error([&] { convert_model(mf, (d.path / "link.safetensors").string(), {}); }, "own input file");
  fs::create_hard_link(m + "/vae/diffusion_pytorch_model.safetensors", d.path / "hard.safetensors");
  test::expect_error([&] { convert_model(mf, (d.path / "hard.safetensors").string(), {}); }, "own input file");
  // A new .safetensors in a checkpoint folder would be read as a second checkpoint.
  test::expect_error([&] { convert_model(mf, m + "/vae/extra.safetensors", {}); }, "two checkpoints");
  EXPECT_FALSE(fs::exists(m + "/vae/extra.safetensors"));

  // The command line: a non-zero exit and the folder intact.
  test::CliRun r = test::run_cli("convert -q --model '" + m + "' -o '" + shard + "'");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("own input file"), std::string::npos) << r.out;
  EXPECT_EQ(read_all(shard), before);
  EXPECT_EQ(test::fatal_problems(ModelFolder::open(m)), "");
  EXPECT_EQ(names_in(m + "/transformer"), (std::set<std::string>{"config.json", "diffusion_pytorch_model.safetensors"}));

  // A converted file onto itself.
  const std::string f = d.str() + "/tiny.safetensors";
  convert_model(mf, f, {});
  const std::string fb = read_all(f);
  test::expect_error([&] { convert_model(ModelFolder::open(f), f, {}); }, "own input file");
  EXPECT_EQ(read_all(f), fb);
  // Elsewhere, even inside the model's root folder, is fine.
  convert_model(mf, m + "/converted.safetensors", {});
  EXPECT_EQ(test::fatal_problems(ModelFolder::open(m + "/converted.safetensors")), "");
}

TEST(ConvertSafety, RefusesAnOutputThatIsNotARegularFile) {
  const ModelFolder mf = ModelFolder::open(test::tiny_model());
  TempDir d;
  const std::string dir = d.str() + "/dir.safetensors", fifo = d.str() + "/fifo.safetensors",
                    dev = d.str() + "/full.safetensors";
  fs::create_directory(dir);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  fs::create_symlink("/dev/full", dev);  // a device through a symlink (the device itself is never at risk here)
  test::expect_error([&] { convert_model(mf, dir, {}); }, "not a regular file");
  test::expect_error([&] { convert_model(mf, fifo, {}); }, "not a regular file");
  test::expect_error([&] { convert_model(mf, dev, {}); }, "not a regular file");
  // The writer itself refuses them too, whoever calls it.
  const Tensor t = Tensor::from_vector({1, 2}, {2});
  test::expect_error([&] { save_safetensors(fifo, {{"a", t}}); }, "is a FIFO, not a regular file");
  test::expect_error([&] { save_safetensors(dev, {{"a", t}}); }, "is a character device");
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_TRUE(fs::is_symlink(dev));
  EXPECT_EQ(names_in(d.path).size(), 3u) << joined(names_in(d.path));
  test::CliRun r = test::run_cli("convert -q --model " + test::tiny_model() + " -o '" + fifo + "'");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_TRUE(fs::is_fifo(fifo));
}

TEST(ConvertSafety, TempFileIsExclusiveAndRemovedOnErrors) {
  TempDir d;
  const std::string out = d.str() + "/x.safetensors", victim = d.str() + "/victim";
  write_all(victim, "precious");
  // A symlink planted at the old fixed temp name: never followed (O_TRUNC through it truncated the victim).
  fs::create_symlink(victim, out + ".tmp");
  save_safetensors(out, {{"a", Tensor::from_vector({1, 2}, {2})}});
  EXPECT_EQ(read_all(victim), "precious");
  EXPECT_TRUE(fs::is_symlink(out + ".tmp"));
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(out)));
  EXPECT_EQ(SafeTensorsFile::open(out)->tensors().size(), 1u);
  // A failing write leaves the folder as it was, the old output included.
  const std::set<std::string> before = names_in(d.path);
  const std::string old = read_all(out);
  for (int threads : {1, 4}) {
    EXPECT_NE(test::error_of([&] {
                save_safetensors_streamed(out, pending(12, [] { ernie::fail("tensor 5 cannot be made"); }), {}, 64,
                                          {}, threads);
              }).find("tensor 5 cannot be made"),
              std::string::npos);
    EXPECT_EQ(names_in(d.path), before) << joined(names_in(d.path));
    EXPECT_EQ(read_all(out), old);
  }
  // A folder that cannot be written: a clear error naming the output.
  test::expect_error([&] { save_safetensors(d.str() + "/no/such/dir/y.safetensors", {}); }, "cannot create a temp file");
}

TEST(ConvertSafety, SigintOrSigtermDuringAWriteRemovesTheTempFile) {
  for (int sig : {SIGINT, SIGTERM}) {
    TempDir d;
    const int st = write_killed_by(d.str() + "/x.safetensors", sig);
    EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == sig) << "signal " << sig << ", wait status " << st;
    EXPECT_TRUE(names_in(d.path).empty()) << joined(names_in(d.path));
  }
  // After a write the signals are back at their default action.
  TempDir d;
  save_safetensors(d.str() + "/y.safetensors", {{"a", Tensor::from_vector({1}, {1})}});
  struct sigaction cur {};
  ASSERT_EQ(::sigaction(SIGTERM, nullptr, &cur), 0);
  EXPECT_TRUE(cur.sa_handler == SIG_DFL || cur.sa_handler == SIG_IGN);
}

TEST(ConvertSafety, AKilledWriteNeverPassesAsWhole) {
  TempDir d;
  const std::string out = d.str() + "/x.safetensors";
  const int st = write_killed_by(out, SIGKILL);  // cannot be caught: its temp file stays
  ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << st;
  EXPECT_FALSE(fs::exists(out));
  const std::set<std::string> left = names_in(d.path);
  ASSERT_EQ(left.size(), 1u) << joined(left);
  ASSERT_EQ(left.begin()->rfind("x.safetensors.tmp.", 0), 0u) << *left.begin();
  // Renamed into place by hand, it is the shape of a whole file (a valid header, a zeroed tail) and is refused.
  const std::string partial = d.str() + "/partial.safetensors";
  fs::rename(d.path / *left.begin(), partial);
  test::expect_error([&] { SafeTensorsFile::open(partial); }, "incomplete file");
  auto f = SafeTensorsFile::open(partial, /*allow_incomplete=*/true);
  EXPECT_EQ(f->tensors().size(), 8u);
  EXPECT_EQ(checksum_status(f->metadata()), ChecksumStatus::Incomplete);
  // doctor says so, with or without --verify, and exits non-zero.
  for (const char* flags : {"", " --verify"}) {
    test::CliRun r = test::run_cli(std::string("doctor") + flags + " --model '" + partial + "'");
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("incomplete"), std::string::npos) << r.out;
  }
}

TEST(ConvertSafety, DoctorVerifiesAConvertedFile) {
  TempDir d;
  const std::string f = d.str() + "/tiny.safetensors";
  convert_model(ModelFolder::open(test::tiny_model()), f, {});
  {
    auto file = SafeTensorsFile::open(f);
    ASSERT_EQ(checksum_status(file->metadata()), ChecksumStatus::Unverified);
    EXPECT_EQ(verify_data_checksum(*file).status, ChecksumStatus::Ok);
  }
  test::CliRun ok = test::run_cli("doctor --verify --model '" + f + "'");
  EXPECT_EQ(ok.status, 0) << ok.out;
  EXPECT_NE(ok.out.find("data checksum ok"), std::string::npos) << ok.out;
  test::CliRun cheap = test::run_cli("doctor --model '" + f + "'");
  EXPECT_EQ(cheap.status, 0) << cheap.out;
  EXPECT_NE(cheap.out.find("not verified"), std::string::npos) << cheap.out;

  // The last 4 KiB of data zeroed, as a truncated file re-padded to its size would read.
  std::string bytes = read_all(f);
  ASSERT_GT(bytes.size(), 8192u);
  const std::string zeros(4096, '\0');
  ASSERT_NE(bytes.substr(bytes.size() - 4096), zeros);
  bytes.replace(bytes.size() - 4096, 4096, zeros);
  write_all(f, bytes);
  DoctorReport r = run_doctor(f, {.verify = true});
  EXPECT_GT(r.problems, 0);
  ASSERT_TRUE(r.json["model"].contains("files")) << r.json.dump(2);
  EXPECT_EQ(r.json["model"]["files"][0]["checksum"], "mismatch") << r.json.dump(2);
  test::CliRun bad = test::run_cli("doctor --verify --model '" + f + "'");
  EXPECT_NE(bad.status, 0) << bad.out;
  EXPECT_NE(bad.out.find("checksum mismatch"), std::string::npos) << bad.out;
  // Without --verify nothing is read, so nothing is seen: the cheap check is only for the placeholder.
  EXPECT_EQ(test::run_cli("doctor --model '" + f + "'").status, 0);

  // A folder's checkpoints from other tools carry none: reported, not a problem.
  DoctorReport folder = run_doctor(test::tiny_model(), {.verify = true});
  EXPECT_EQ(folder.problems, 0) << folder.json.dump(2);
  for (const auto& e : folder.json["model"]["files"]) EXPECT_EQ(e["checksum"], "none") << e.dump();
}
