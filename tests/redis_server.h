// A redis-server of the test's own on a free loopback port, in a temporary folder: started and stopped by
// the test (killed with the test process too: PR_SET_PDEATHSIG), restartable on the same port and folder
// so that an append-only file carries the data across. Tests skip when redis-server is not installed.
#pragma once
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace ernie::test {

inline std::string find_redis_server() {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/local/bin:/usr/bin:/bin";
  p += ":/usr/sbin:/sbin";
  size_t start = 0;
  while (start <= p.size()) {
    const size_t end = std::min(p.find(':', start), p.size());
    const std::string cand = p.substr(start, end - start) + "/redis-server";
    if (end > start && access(cand.c_str(), X_OK) == 0) return cand;
    start = end + 1;
  }
  return {};
}

inline int free_loopback_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

class RedisServer {
 public:
  explicit RedisServer(bool aof = false) : aof_(aof) {
    binary_ = find_redis_server();
    char tmpl[] = "/tmp/ernie-redis-test-XXXXXX";
    if (mkdtemp(tmpl)) dir_ = tmpl;
  }
  ~RedisServer() {
    stop(/*hard=*/true);
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  bool installed() const { return !binary_.empty(); }
  int port() const { return port_; }
  const std::string& dir() const { return dir_; }
  bool running() const { return pid_ > 0; }

  // Starts it (on a new free port the first time, on the same port after), and waits until it answers PING.
  bool start(std::string* why) {
    if (binary_.empty() || dir_.empty()) {
      *why = "redis-server is not installed (apt-get install redis-server; scripts/setup.sh --tests)";
      return false;
    }
    for (int tries = 0; tries < 5; ++tries) {
      if (port_ == 0 || tries > 0) port_ = free_loopback_port();
      if (spawn() && wait_ready(std::chrono::seconds(10))) return true;
      stop(true);
    }
    *why = "redis-server did not start (see " + dir_ + "/redis.log)";
    return false;
  }
  // Restarts on the same port (and, with AOF, the same data); hard = SIGKILL, else SIGTERM (it saves).
  bool restart(bool hard) {
    stop(hard);
    return spawn() && wait_ready(std::chrono::seconds(10));
  }
  void stop(bool hard) {
    if (pid_ <= 0) return;
    kill(pid_, hard ? SIGKILL : SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    int st = 0;
    while (waitpid(pid_, &st, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &st, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    pid_ = -1;
  }

 private:
  bool spawn() {
    std::vector<std::string> args = {binary_, "--port", std::to_string(port_), "--bind", "127.0.0.1",
                                     "--save", "", "--dir", dir_, "--logfile", dir_ + "/redis.log",
                                     "--daemonize", "no", "--appendonly", aof_ ? "yes" : "no",
                                     "--appendfsync", "always"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) return false;
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // the test process died: so does its redis-server
      if (getppid() != parent) _exit(127);
      execv(argv[0], argv.data());
      _exit(127);
    }
    pid_ = pid;
    return true;
  }
  bool wait_ready(std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {  // exited (port taken?)
        pid_ = -1;
        return false;
      }
      timeval tv{0, 200000};
      if (redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, tv)) {
        bool ok = false;
        if (!c->err) {
          redisSetTimeout(c, tv);
          if (auto* r = static_cast<redisReply*>(redisCommand(c, "PING"))) {
            ok = r->type == REDIS_REPLY_STATUS;  // not LOADING (an error reply)
            freeReplyObject(r);
          }
        }
        redisFree(c);
        if (ok) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  bool aof_;
  std::string binary_, dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace ernie::test
