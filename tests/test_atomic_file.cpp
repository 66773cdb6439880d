// The one writer (core/atomic_file.h): planted symlinks, device nodes, inputs, signals (issue 45, items 5-7).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/file.h"
#include "io/png.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;
using namespace ernie;

namespace {
fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("ernie-atomic-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}
std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}
int temp_files(const fs::path& d) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(d))
    if (e.path().filename().string().find(".tmp") != std::string::npos && !fs::is_symlink(e.symlink_status())) ++n;
  return n;
}
}  // namespace

TEST(AtomicFile, WritesAndReplacesRegularFile) {
  const fs::path d = fresh_dir("plain");
  write_file_atomic((d / "a.txt").string(), "one");
  write_file_atomic((d / "a.txt").string(), "two");
  EXPECT_EQ(slurp(d / "a.txt"), "two");
  EXPECT_EQ(temp_files(d), 0);
  fs::remove_all(d);
}

// Symlinks planted at the old writers' names (`<out>.tmp<pid>`, `<out>.tmp-<pid>`, for the next 3,000 pids) and at
// random-looking `<out>.tmp.<hex>` names all point at a victim file, which must stay unchanged.
TEST(AtomicFile, PlantedSymlinksLeaveTheVictimUnchanged) {
  const fs::path d = fresh_dir("symlinks");
  const fs::path victim = d / "victim.txt";
  { std::ofstream(victim) << "precious"; }
  const pid_t me = ::getpid();
  for (const char* out : {"out.png", "out.gguf", "out.safetensors"}) {
    for (int k = 0; k < 3000; ++k) {
      const std::string pid = std::to_string(me + k);
      fs::create_symlink(victim, d / (std::string(out) + ".tmp" + pid));
      fs::create_symlink(victim, d / (std::string(out) + ".tmp-" + pid));
      char hex[32];
      std::snprintf(hex, sizeof hex, ".tmp.%012x", unsigned(k * 2654435761u));
      fs::create_symlink(victim, d / (std::string(out) + hex));
    }
  }
  write_png((d / "out.png").string(), 2, 1, std::vector<uint8_t>(6, 200), {});
  save_safetensors((d / "out.safetensors").string(), {{"x", Tensor::zeros({2}, DType::F32)}});
  write_file_atomic((d / "out.gguf").string(), "GGUF");
  EXPECT_EQ(slurp(victim), "precious");
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(d / "out.png")));
  EXPECT_EQ(temp_files(d), 0);
  fs::remove_all(d);
}

// A device node (or a symlink to one) as the output is refused and left as it was (item 6).
TEST(AtomicFile, RefusesCharacterDevice) {
  const fs::path d = fresh_dir("chardev");
  fs::path node = d / "out.png";
  bool own_node = ::mknod(node.c_str(), S_IFCHR | 0666, makedev(1, 7)) == 0;  // /dev/full's numbers, as root
  if (!own_node) fs::create_symlink("/dev/null", node);
  try {
    write_png(node.string(), 2, 1, std::vector<uint8_t>(6, 0), {});
    FAIL() << "a character device was replaced";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a character device"), std::string::npos) << e.what();
  }
  struct stat st {};
  ASSERT_EQ(::stat(node.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  if (own_node) {
    ASSERT_EQ(::lstat(node.c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode));
  }
  EXPECT_THROW(write_file_atomic(d.string(), "x"), Error);  // a folder too
  EXPECT_EQ(temp_files(d), 0);
  fs::remove_all(d);
}

TEST(AtomicFile, RefusesAnInput) {
  const fs::path d = fresh_dir("input");
  write_file_atomic((d / "in.bin").string(), "in");
  fs::create_symlink(d / "in.bin", d / "link.bin");
  EXPECT_THROW(write_file_atomic((d / "link.bin").string(), "out", {(d / "in.bin").string()}), Error);
  EXPECT_EQ(slurp(d / "in.bin"), "in");
  EXPECT_EQ(temp_files(d), 0);
  fs::remove_all(d);
}

// Each catchable terminating signal, arriving while the temp file is open, leaves no temp file behind (item 7).
TEST(AtomicFile, EverySignalRemovesTheTempFile) {
  for (int sig : {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGPIPE, SIGALRM}) {
    const fs::path d = fresh_dir("sig" + std::to_string(sig));
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      for (int s = 1; s < 32; ++s) ::signal(s, SIG_DFL);
      AtomicFile f((d / "out.bin").string());
      f.write("partial", 7);
      [[maybe_unused]] ssize_t w = ::write(ready[1], "r", 1);
      for (;;) ::pause();
    }
    ::close(ready[1]);
    char c = 0;
    ASSERT_EQ(::read(ready[0], &c, 1), 1);
    ::close(ready[0]);
    EXPECT_EQ(temp_files(d), 1);
    ::kill(child, sig);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << "signal " << sig;
    EXPECT_EQ(temp_files(d), 0) << "signal " << sig << " left the temp file";
    EXPECT_FALSE(fs::exists(d / "out.bin"));
    fs::remove_all(d);
  }
}
