// Runs the ernie-image binary built with the tests and captures its exit status and output.
#pragma once
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace ernie::test {

struct CliRun {
  int status = -1;
  std::string out;  // stdout and stderr together
};

// timeout_s > 0: killed after that many seconds (status 124), for commands that would otherwise run on (serve).
inline CliRun run_cli(const std::string& args, int timeout_s = 0) {
  std::string cmd = (timeout_s > 0 ? "timeout -k 5 " + std::to_string(timeout_s) + " " : std::string()) +
                    std::string(ERNIE_CLI) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  CliRun r;
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

}  // namespace ernie::test
