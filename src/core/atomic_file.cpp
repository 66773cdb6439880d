#include "core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>

#include "core/error.h"

namespace ernie {

namespace fs = std::filesystem;

const char* file_kind_name(unsigned mode) {
  const mode_t m = mode_t(mode);
  return S_ISREG(m)    ? "a regular file"
         : S_ISDIR(m)  ? "a folder"
         : S_ISFIFO(m) ? "a FIFO"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
         : S_ISSOCK(m) ? "a socket"
                       : "a special file";
}

namespace {

// ---- temp files removed on a terminating signal ----------------------------------------------------------
// A fixed table the handler walks without locks or allocation: each armed slot holds one temp file's path. The
// handler unlinks them, restores the default action and re-raises the signal.
constexpr int kTempSlots = 64;
struct TempSlot {
  std::atomic<int> armed{0};
  char path[4096];
};
TempSlot g_slots[kTempSlots];
constexpr int kSignals[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGPIPE, SIGALRM};
constexpr int kNumSignals = int(sizeof(kSignals) / sizeof(kSignals[0]));
std::mutex g_mu;  // slot claims and the handlers' installation
int g_users = 0;
bool g_ours[kNumSignals] = {};

void remove_temps_and_reraise(int sig) {
  const int saved = errno;
  for (TempSlot& s : g_slots)
    if (s.armed.load(std::memory_order_acquire) == 1) ::unlink(s.path);
  ::signal(sig, SIG_DFL);
  ::raise(sig);  // blocked while this handler runs; delivered with the default action when it returns
  errno = saved;
}

// Arms signal cleanup for `path`: the slot, or -1 when the table is full or the path too long (the file is then
// still removed on errors, only not on a signal).
int arm(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_mu);
  int slot = -1;
  if (path.size() < sizeof(g_slots[0].path))
    for (int i = 0; i < kTempSlots && slot < 0; ++i)
      if (g_slots[i].armed.load(std::memory_order_relaxed) == 0) slot = i;
  if (slot < 0) return -1;
  std::memcpy(g_slots[slot].path, path.c_str(), path.size() + 1);
  g_slots[slot].armed.store(1, std::memory_order_release);
  if (g_users++ == 0)
    for (int k = 0; k < kNumSignals; ++k) {
      // Only where the process left the default action: a program with its own handler (serve drains on
      // SIGTERM) or one that ignores the signal (nohup, SIGPIPE in a server) keeps its choice.
      struct sigaction old {};
      g_ours[k] = false;
      if (::sigaction(kSignals[k], nullptr, &old) != 0 || (old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL)
        continue;
      struct sigaction sa {};
      sa.sa_handler = remove_temps_and_reraise;
      sigemptyset(&sa.sa_mask);
      for (int sig : kSignals) sigaddset(&sa.sa_mask, sig);
      g_ours[k] = ::sigaction(kSignals[k], &sa, nullptr) == 0;
    }
  return slot;
}

void disarm(int slot) {
  if (slot < 0) return;
  std::lock_guard<std::mutex> lock(g_mu);
  g_slots[slot].armed.store(0, std::memory_order_release);
  if (--g_users > 0) return;
  for (int k = 0; k < kNumSignals; ++k) {
    struct sigaction cur {};
    // The default back, unless another handler was installed since.
    if (g_ours[k] && ::sigaction(kSignals[k], nullptr, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) &&
        cur.sa_handler == remove_temps_and_reraise)
      ::signal(kSignals[k], SIG_DFL);
    g_ours[k] = false;
  }
}

bool pwrite_all(int fd, const void* p, size_t n, size_t off) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t k = ::pwrite(fd, c, std::min<size_t>(n, size_t(1) << 30), off_t(off));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k, n -= size_t(k), off += size_t(k);
  }
  return true;
}

}  // namespace

void check_output_path(const std::string& path, const std::vector<std::string>& inputs, const char* inputs_are) {
  ERNIE_CHECK(!path.empty(), "output path is empty");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;  // a new file (or a dangling symlink, which rename replaces)
  // rename() would replace a device node, a FIFO or (when empty) a folder: anything but a file is refused.
  if (!S_ISREG(st.st_mode))
    fail(path, ": exists and is ", file_kind_name(st.st_mode), ", not a regular file; refusing to replace it");
  for (const std::string& in : inputs) {  // the same file through a symlink or a hard link
    struct stat si {};
    if (::stat(in.c_str(), &si) == 0 && si.st_dev == st.st_dev && si.st_ino == st.st_ino)
      fail(path, ": resolves to ", inputs_are, " ", in, "; writing it would destroy that input. Choose another ",
           "output path");
  }
}

AtomicFile::AtomicFile(const std::string& path, const std::vector<std::string>& inputs) : path_(path) {
  check_output_path(path, inputs);
  const fs::path p(path);
  std::string base = p.filename().string();
  if (base.size() > 200) base.resize(200);  // room for the suffix within a file name's 255 bytes
  std::random_device rd;
  int err = 0;
  for (int attempt = 0; attempt < 64 && fd_ < 0; ++attempt) {
    const uint64_t r = ((uint64_t(rd()) << 32) ^ rd()) & 0xffffffffffffull;
    char suffix[32];
    std::snprintf(suffix, sizeof suffix, ".tmp.%012llx", static_cast<unsigned long long>(r));
    tmp_ = (p.parent_path() / (base + suffix)).string();
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    err = errno;
    if (fd_ < 0 && err != EEXIST) break;
  }
  if (fd_ < 0) {
    tmp_.clear();
    fail(path, ": cannot create a temp file beside it (", std::strerror(err), ")");
  }
  slot_ = arm(tmp_);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  disarm(slot_);
}

void AtomicFile::write(const void* data, size_t n) {
  ERNIE_CHECK(fd_ >= 0, path_, ": written after commit");
  const char* c = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::write(fd_, c, std::min<size_t>(n, size_t(1) << 30));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      const int e = k < 0 ? errno : EIO;
      fail(path_, ": write failed (", std::strerror(e), "; disk full?)");
    }
    c += k, n -= size_t(k);
  }
}

void AtomicFile::pwrite(const void* data, size_t n, size_t offset) {
  ERNIE_CHECK(fd_ >= 0, path_, ": written after commit");
  if (!pwrite_all(fd_, data, n, offset)) {
    const int e = errno ? errno : EIO;
    fail(path_, ": write failed (", std::strerror(e), "; disk full?)");
  }
}

void AtomicFile::commit() {
  ERNIE_CHECK(fd_ >= 0, path_, ": committed twice");
  if (::fsync(fd_) != 0) {
    const int e = errno;
    fail(path_, ": fsync of the temp file failed (", std::strerror(e), "; disk full or failing?)");
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int e = errno;
    fail(path_, ": write failed (", std::strerror(e), "; disk full?)");
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    fail(path_, ": cannot rename the temp file over it (", std::strerror(e), ")");
  }
  tmp_.clear();
  // Best effort: some file systems refuse to fsync a folder; the data itself is already on disk.
  const fs::path parent = fs::path(path_).parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_file_atomic(const std::string& path, std::string_view bytes, const std::vector<std::string>& inputs) {
  AtomicFile f(path, inputs);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

}  // namespace ernie
