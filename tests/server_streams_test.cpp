// server/event_streams.h: streams served from one thread over socket pairs: the head and the source's events
// arrive, the stream closes when its source ends or its client goes, the caps refuse with a reason, and
// stop() gives every source a last poll.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "server/event_streams.h"

namespace ernie::server {
namespace {

// Sends `n` events, one per poll, then ends; counts its polls and whether it was destroyed.
class Counting : public EventSource {
 public:
  Counting(int n, std::atomic<int>& alive) : n_(n), alive_(alive) { ++alive_; }
  ~Counting() override { --alive_; }
  bool poll(std::string& out) override {
    if (sent_ < n_) out += sse_event(std::to_string(++sent_), "progress", "{}");
    return sent_ < n_ || n_ < 0;
  }

 private:
  int n_, sent_ = 0;
  std::atomic<int>& alive_;
};

// Everything the peer sends until it closes (or 5 s pass).
std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, size_t(n));
  }
  return out;
}

struct Pair {
  int server = -1, client = -1;
  Pair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    server = fds[0], client = fds[1];
  }
  ~Pair() { ::close(client); }
};

TEST(EventStreams, WritesTheHeadAndEventsThenClosesWhenTheSourceEnds) {
  std::atomic<int> alive{0}, released{0};
  EventStreams hub({}, [&](const std::string& ip) { released += ip == "1.2.3.4"; });
  Pair p;
  std::string why;
  ASSERT_TRUE(hub.open(p.server, "1.2.3.4", std::make_unique<Counting>(3, alive), "X-Job: 7\r\n", why)) << why;
  const std::string got = read_all(p.client);
  EXPECT_EQ(got.rfind("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n", 0), 0u) << got;
  EXPECT_NE(got.find("X-Job: 7\r\n"), std::string::npos);
  EXPECT_NE(got.find("\r\n\r\nid: 1\nevent: progress\ndata: {}\n\nid: 2\n"), std::string::npos) << got;
  EXPECT_NE(got.find("id: 3\n"), std::string::npos);
  for (int i = 0; i < 100 && released == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(released, 1);
  EXPECT_EQ(alive, 0);
  EXPECT_EQ(hub.open_count(), 0);
}

TEST(EventStreams, CapsPerClientAndInAllAndAClientThatLeaves) {
  std::atomic<int> alive{0};
  StreamLimits lim;
  lim.max_streams = 3;
  lim.max_per_client = 2;
  EventStreams hub(lim, nullptr);
  Pair a, b, c, d;
  std::string why;
  ASSERT_TRUE(hub.open(a.server, "ip1", std::make_unique<Counting>(-1, alive), "", why));
  ASSERT_TRUE(hub.open(b.server, "ip1", std::make_unique<Counting>(-1, alive), "", why));
  EXPECT_FALSE(hub.open(c.server, "ip1", std::make_unique<Counting>(-1, alive), "", why));
  EXPECT_NE(why.find("per client"), std::string::npos) << why;
  ASSERT_TRUE(hub.open(c.server, "ip2", std::make_unique<Counting>(-1, alive), "", why));
  EXPECT_FALSE(hub.open(d.server, "ip3", std::make_unique<Counting>(-1, alive), "", why));
  EXPECT_NE(why.find("server's limit"), std::string::npos) << why;
  ::close(d.server);
  EXPECT_EQ(hub.open_count(), 3);
  // A client that goes away: its stream closes and its source is destroyed.
  ::shutdown(a.client, SHUT_RDWR);
  for (int i = 0; i < 200 && hub.open_count() != 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(hub.open_count(), 2);
  EXPECT_EQ(alive, 2);
  hub.stop();
  EXPECT_EQ(hub.open_count(), 0);
  EXPECT_EQ(alive, 0);
  EXPECT_FALSE(hub.open(d.server, "ip4", std::make_unique<Counting>(1, alive), "", why));
}

}  // namespace
}  // namespace ernie::server
