// Errors: one exception type inside the library, turned into error values (status + message) at every
// public boundary (C API, CLI, server). Messages name the file and the field so a user can act on them.
#pragma once
#include <stdexcept>
#include <string>
#include <utility>

namespace ernie {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// Out of device or host memory: a distinct type so callers can say "try a smaller size".
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

// Raised between steps when a caller asked to stop.
class Cancelled : public Error {
 public:
  Cancelled() : Error("cancelled") {}
};

template <class... Args>
[[noreturn]] void fail(Args&&... parts) {
  std::string s;
  (s += ... += std::string(std::forward<Args>(parts)));
  throw Error(s);
}

#define ERNIE_CHECK(cond, ...)                 \
  do {                                         \
    if (!(cond)) ::ernie::fail(__VA_ARGS__);   \
  } while (0)

}  // namespace ernie
