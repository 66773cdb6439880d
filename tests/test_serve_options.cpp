// `ernie-image serve --offload / --max-vram`: bad values fail before anything is loaded or bound, with
// the messages generate gives for the same flags (one shared check, io/memory_plan.h), and exit != 0.
// The modes at work over a socket: tests/server/offload_test.py.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "cli.h"
#include "golden.h"

namespace {

using ernie::test::run_cli;

// A serve command that must fail; the timeout stops one that would serve instead (status 124).
ernie::test::CliRun serve(const std::string& args) {
  return run_cli("serve --model '" + ernie::test::tiny_model() + "' --port 0 --threads 1 " + args, 60);
}

std::string error_line(const std::string& out) {
  const size_t at = out.find("error: ");
  return at == std::string::npos ? "" : out.substr(at, out.find('\n', at) - at);
}

TEST(ServeOptions, BadValuesFailWithTheFlagNamed) {
  struct Case {
    std::string args, want;
  } cases[] = {
      {"--offload bogus", "--offload: unknown mode 'bogus' (use none, text-encoder or blocks)"},
      {"--offload ''", "--offload: unknown mode ''"},
      {"--device cpu --max-vram 8", "--max-vram: applies to a CUDA device"},
      {"--offload none --max-vram 8", "give --offload or --max-vram, not both"},
      {"--max-vram 0", "--max-vram must be a positive size in GiB"},
      {"--max-vram -2", "--max-vram must be a positive size in GiB"},
      {"--max-vram nan", "--max-vram must be a positive size in GiB"},
      {"--max-vram lots", "--max-vram"},  // CLI11: not a number
      // The shared queue's flags (issue 27): checked before any model loads or Redis is reached.
      {"--role worker", "--role worker needs --queue redis://HOST:PORT"},
      {"--queue http://localhost:6379", "--queue: redis URL 'http://localhost:6379'"},
      {"--queue redis://h:70000", "--queue: redis URL"},
      {"--queue redis://127.0.0.1:1 --job-lease 0", "--job-lease must be from 1 to 86400 seconds"},
      {"--queue redis://127.0.0.1:1 --max-attempts 0", "--max-attempts must be from 1 to 100"},
      {"--role boss", "--role"},
  };
  for (const Case& c : cases) {
    auto r = serve(c.args);
    EXPECT_NE(r.status, 0) << c.args << "\n" << r.out;
    EXPECT_NE(r.status, 124) << c.args << ": still running after 60 s\n" << r.out;
    EXPECT_NE(r.out.find(c.want), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("listening on"), std::string::npos) << c.args << "\n" << r.out;
  }
}

// On the CPU, --offload blocks is the error generate gives, word for word.
TEST(ServeOptions, BlocksOnTheCpuIsGeneratesError) {
  auto s = serve("--device cpu --offload blocks");
  EXPECT_NE(s.status, 0) << s.out;
  EXPECT_NE(s.status, 124) << s.out;
  auto g = run_cli("generate --model '" + ernie::test::tiny_model() +
                   "' -p x -W 16 -H 16 --steps 1 --device cpu --offload blocks -o /tmp/x.png");
  EXPECT_NE(g.status, 0) << g.out;
  EXPECT_NE(error_line(s.out).find("--offload blocks: streaming DiT blocks needs a CUDA device"), std::string::npos)
      << s.out;
  EXPECT_EQ(error_line(s.out), error_line(g.out)) << s.out << "\n" << g.out;
}

// A busy port is an error with a non-zero exit, never a second "listening" server. The port is held with
// SO_REUSEPORT, as cpp-httplib's own default options set it: a server that sets it too would bind beside it (and
// the kernel would split the connections), which is what this test catches.
TEST(ServeOptions, BusyPortIsAnError) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  const int yes = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &yes, sizeof yes);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  ASSERT_EQ(::listen(fd, 4), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string port = std::to_string(ntohs(a.sin_port));
  auto r = run_cli("serve --model '" + ernie::test::tiny_model() + "' --host 127.0.0.1 --port " + port +
                   " --threads 1 --quiet", 30);
  ::close(fd);
  EXPECT_EQ(r.status, 1) << (r.status == 124 ? "still serving after 30 s: " : "") << r.out;
  EXPECT_NE(r.out.find("error: serve: cannot listen on 127.0.0.1:" + port + ": port " + port + " is in use"),
            std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("listening on"), std::string::npos) << r.out;
}

TEST(ServeOptions, HelpDocumentsTheModes) {
  auto r = run_cli("serve --help");
  EXPECT_EQ(r.status, 0) << r.out;
  for (const char* s : {"--offload", "--max-vram", "Default none", "only while used", "no batching"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
}

}  // namespace
