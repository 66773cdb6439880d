#include "server/event_streams.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "core/error.h"

namespace ernie::server {
namespace {

using Clock = std::chrono::steady_clock;

Clock::duration seconds(double s) { return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); }

void wake(int fd) {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t w = ::write(fd, &one, sizeof one);
}

}  // namespace

std::string sse_event(const std::string& id, const std::string& type, const std::string& data) {
  return "id: " + id + "\nevent: " + type + "\ndata: " + data + "\n\n";
}

struct EventStreams::Stream {
  int fd = -1;
  std::string ip;
  std::unique_ptr<EventSource> source;
  std::string out;   // written from `sent` on
  size_t sent = 0;
  bool ended = false;     // the source is over: close once `out` is written
  bool want_out = false;  // EPOLLOUT is on
  Clock::time_point last_write = Clock::now();
};

EventStreams::EventStreams(StreamLimits limits, std::function<void(const std::string&)> closed)
    : lim_(limits), closed_(std::move(closed)) {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ERNIE_CHECK(epoll_fd_ >= 0 && wake_fd_ >= 0, "serve: cannot create the event streams' loop");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  thread_ = std::thread([this] { loop(); });
}

EventStreams::~EventStreams() {
  stop(0);
  ::close(epoll_fd_);
  ::close(wake_fd_);
}

bool EventStreams::open(int fd, const std::string& ip, std::unique_ptr<EventSource> source,
                        const std::string& extra_headers, std::string& why) {
  auto s = std::make_unique<Stream>();
  s->fd = fd;
  s->ip = ip;
  s->source = std::move(source);
  s->out = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
           "X-Accel-Buffering: no\r\nConnection: close\r\n" + extra_headers + "\r\n";
  {
    std::lock_guard<std::mutex> l(mu_);
    int& mine = per_client_[ip];
    if (stop_ || open_ >= lim_.max_streams || mine >= lim_.max_per_client) {
      why = stop_ ? "the server is shutting down"
            : open_ >= lim_.max_streams
                ? "too many event streams open (" + std::to_string(lim_.max_streams) + ", the server's limit)"
                : "too many event streams open from this client (" + std::to_string(lim_.max_per_client) +
                      ", the limit per client)";
      if (mine == 0) per_client_.erase(ip);
      return false;
    }
    ++mine;
    ++open_;
    incoming_.push_back(std::move(s));
  }
  wake(wake_fd_);
  return true;
}

int EventStreams::open_count() const {
  std::lock_guard<std::mutex> l(mu_);
  return open_;
}

void EventStreams::stop(double grace_s) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) return;
    grace_s_ = grace_s;
    stop_ = true;
  }
  wake(wake_fd_);
  if (thread_.joinable()) thread_.join();
}

void EventStreams::loop() {
  epoll_event events[64];
  Clock::time_point next_poll = Clock::now();
  auto adopt = [this] {
    std::vector<std::unique_ptr<Stream>> in;
    {
      std::lock_guard<std::mutex> l(mu_);
      in.swap(incoming_);
    }
    for (auto& s : in) {
      const int fl = ::fcntl(s->fd, F_GETFL, 0);
      if (fl >= 0) ::fcntl(s->fd, F_SETFL, fl | O_NONBLOCK);
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.fd = s->fd;
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, s->fd, &ev);
      const int fd = s->fd;
      streams_[fd] = std::move(s);
      flush(*streams_[fd]);
    }
  };
  while (!stop_) {
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_poll - Clock::now()).count();
    const int n = ::epoll_wait(epoll_fd_, events, 64, int(std::max<int64_t>(0, wait) + 1));
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_fd_) {
        uint64_t v;
        [[maybe_unused]] ssize_t r = ::read(wake_fd_, &v, sizeof v);
        adopt();
        continue;
      }
      auto it = streams_.find(fd);
      if (it == streams_.end()) continue;
      bool gone = (events[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0;
      if (!gone && (events[i].events & EPOLLIN)) {  // a client has nothing to say on a stream: drop it
        char buf[4096];
        ssize_t r;
        while ((r = ::recv(fd, buf, sizeof buf, 0)) > 0) {
        }
        gone = r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
      }
      if (gone) close_stream(fd);
      else if (events[i].events & EPOLLOUT) flush(*it->second);
    }
    if (Clock::now() >= next_poll) {
      poll_all(false);
      next_poll = Clock::now() + seconds(lim_.poll_s);
    }
  }
  // Stopping: every source once more (its last events), written for up to the grace period, then closed.
  adopt();
  poll_all(true);
  const Clock::time_point until = Clock::now() + seconds(grace_s_);
  while (!streams_.empty() && Clock::now() < until) {
    const int n = ::epoll_wait(epoll_fd_, events, 64, 20);
    for (int i = 0; i < n; ++i) {
      auto it = streams_.find(events[i].data.fd);
      if (it == streams_.end()) continue;
      if (events[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) close_stream(it->first);
      else if (events[i].events & EPOLLOUT) flush(*it->second);
    }
    if (n == 0) break;  // nothing can be written now: a client that does not read is not waited for
  }
  while (!streams_.empty()) close_stream(streams_.begin()->first);
}

void EventStreams::poll_all(bool final) {
  const Clock::time_point now = Clock::now();
  std::vector<int> fds;
  for (auto& [fd, s] : streams_) fds.push_back(fd);
  for (int fd : fds) {
    Stream& s = *streams_[fd];
    if (!s.ended) {
      const size_t before = s.out.size();
      bool more = true;
      try {
        more = s.source->poll(s.out);
      } catch (const std::exception&) {
        more = false;  // a source that fails ends its stream
      }
      s.ended = !more || final;
      if (s.out.size() == before && !s.ended && now - s.last_write >= seconds(lim_.ping_s)) s.out += ": ping\n\n";
    }
    if (s.out.size() - s.sent > lim_.max_unsent_bytes) {
      close_stream(fd);
      continue;
    }
    flush(s);
  }
}

void EventStreams::flush(Stream& s) {
  while (s.sent < s.out.size()) {
    const ssize_t n = ::send(s.fd, s.out.data() + s.sent, s.out.size() - s.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      s.sent += size_t(n);
      s.last_write = Clock::now();
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    return close_stream(s.fd);
  }
  if (s.sent == s.out.size()) {
    s.out.clear();
    s.sent = 0;
    if (s.ended) return close_stream(s.fd);
  } else if (s.sent > (size_t(1) << 20)) {
    s.out.erase(0, s.sent);
    s.sent = 0;
  }
  const bool want = !s.out.empty();
  if (want != s.want_out) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0u);
    ev.data.fd = s.fd;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, s.fd, &ev);
    s.want_out = want;
  }
}

void EventStreams::close_stream(int fd) {
  auto it = streams_.find(fd);
  if (it == streams_.end()) return;
  std::unique_ptr<Stream> s = std::move(it->second);
  streams_.erase(it);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::shutdown(fd, SHUT_WR);
  ::close(fd);
  s->source.reset();
  {
    std::lock_guard<std::mutex> l(mu_);
    auto pc = per_client_.find(s->ip);
    if (pc != per_client_.end() && --pc->second <= 0) per_client_.erase(pc);
    --open_;
  }
  if (closed_) closed_(s->ip);
}

}  // namespace ernie::server
