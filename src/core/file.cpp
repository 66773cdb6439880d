#include "core/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace ernie {

int open_regular_file(const std::string& path, size_t* size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ERNIE_CHECK(fd >= 0, path, ": cannot open (", std::strerror(errno), ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const bool dir = S_ISDIR(st.st_mode);
    ::close(fd);
    fail(path, ": not a regular file", dir ? " (it is a folder)" : " (a device, FIFO or socket)");
  }
  // Reads of a regular file never block; plain blocking reads from here on.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) & ~O_NONBLOCK);
  if (size) *size = size_t(st.st_size);
  return fd;
}

std::string read_file_head(const std::string& path, size_t n) {
  size_t size = 0;
  const int fd = open_regular_file(path, &size);
  std::string head(n, '\0');
  const ssize_t got = ::pread(fd, head.data(), n, 0);
  ::close(fd);
  head.resize(size_t(std::max<ssize_t>(got, 0)));
  return head;
}

std::string read_regular_file(const std::string& path, size_t max_bytes) {
  size_t size = 0;
  const int fd = open_regular_file(path, &size);
  if (size > max_bytes) {
    ::close(fd);
    fail(path, ": ", std::to_string(size), " bytes, more than the ", std::to_string(max_bytes),
         " this file may have");
  }
  std::string out(size, '\0');
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::read(fd, out.data() + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += size_t(n);
  }
  const int err = errno;
  ::close(fd);
  ERNIE_CHECK(got == size, path, ": read error (", got < size ? std::strerror(err) : "short read", ")");
  return out;
}

}  // namespace ernie
