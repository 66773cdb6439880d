#include "server/connection_guard.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "core/error.h"
#include "server/api_error.h"

namespace ernie::server {
namespace {

using Clock = std::chrono::steady_clock;

Clock::duration seconds(double s) { return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); }

const char* reason_phrase(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 417: return "Expectation Failed";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
  }
}

std::string error_response(int status, const std::string& reason, size_t max_body) {
  ApiError e = status == 413   ? too_large(max_body)
               : status == 401 ? unauthorized()
                               : ApiError{status, reason, status >= 500 ? "server_error" : "invalid_request_error", "",
                                          status == 408 ? "timeout" : status == 503 ? "busy" : "bad_request"};
  const std::string body = e.to_json().dump();
  return "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         (status == 503 ? "\r\nRetry-After: 1" : "") + (status == 401 ? "\r\nWWW-Authenticate: Bearer" : "") +
         "\r\nConnection: close\r\n\r\n" + body;
}

// Routes under /v1 need the API key; the web page, /health and /metrics do not.
bool needs_key(std::string_view target) {
  return target == "/v1" || target.rfind("/v1/", 0) == 0 || target.rfind("/v1?", 0) == 0;
}

// Best effort, never blocking: the response of a rejected request is small.
void send_now(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n <= 0) return;
    off += size_t(n);
  }
}

void peer_of(int fd, std::string& ip, int& port) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ip = "?";
  port = 0;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return;
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
    port = ntohs(a->sin6_port);
  }
  ip = buf;
}

void set_blocking(int fd, bool blocking) {
  const int fl = ::fcntl(fd, F_GETFL, 0);
  if (fl >= 0) ::fcntl(fd, F_SETFL, blocking ? (fl & ~O_NONBLOCK) : (fl | O_NONBLOCK));
}

constexpr double kDrainSeconds = 3;         // a rejected client's unread bytes are read and dropped this long
constexpr size_t kDrainBytes = 16 << 20;    // ... or up to this many, so its response is not lost to a reset

}  // namespace

struct ConnectionGuard::Conn {
  int fd = -1;
  std::string ip;
  int port = 0;
  Clock::time_point deadline;
  std::string buf;
  HeadCheck head;
  size_t reserved = 0;  // body bytes counted in buffered_ and client_buffered_
  size_t window_start = 0;  // body bytes at the start of the current window
  bool first_window = true;
  bool draining = false;
  size_t drained = 0;
};

ConnectionGuard::ConnectionGuard(GuardOptions opt, Dispatch dispatch) : opt_(opt), dispatch_(std::move(dispatch)) {
  opt_.max_client_buffered_bytes = std::max(opt_.max_client_buffered_bytes, opt_.head.max_body_bytes);
  opt_.max_buffered_bytes = std::max(opt_.max_buffered_bytes, opt_.max_client_buffered_bytes);
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ERNIE_CHECK(epoll_fd_ >= 0 && wake_fd_ >= 0, "serve: cannot create the connection guard's event loop");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  thread_ = std::thread([this] { loop(); });
}

ConnectionGuard::~ConnectionGuard() {
  stop();
  ::close(epoll_fd_);
  ::close(wake_fd_);
}

void ConnectionGuard::stop() {
  if (stop_.exchange(true)) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t w = ::write(wake_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> l(mu_);
  for (auto& c : incoming_) ::close(c->fd);
  incoming_.clear();
}

void ConnectionGuard::admit(int fd) {
  auto c = std::make_unique<Conn>();
  c->fd = fd;
  peer_of(fd, c->ip, c->port);
  c->deadline = Clock::now() + seconds(opt_.head_timeout_s);
  {
    std::lock_guard<std::mutex> l(mu_);
    int& mine = per_client_[c->ip];
    if (stop_ || open_ >= opt_.max_connections || mine >= opt_.max_per_client) {
      if (mine == 0) per_client_.erase(c->ip);
      send_now(fd, error_response(503, stop_ ? "shutting down" : "too many open connections", 0));
      if (opt_.on_reject) opt_.on_reject(503);
      ::close(fd);
      return;
    }
    ++mine;
    ++open_;
    incoming_.push_back(std::move(c));
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t w = ::write(wake_fd_, &one, sizeof one);
}

void ConnectionGuard::release(const std::string& ip) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = per_client_.find(ip);
  if (it != per_client_.end() && --it->second <= 0) per_client_.erase(it);
  --open_;
}

ConnectionGuard::Counts ConnectionGuard::counts() const {
  std::lock_guard<std::mutex> l(mu_);
  return {open_, int(conns_.size()), buffered_};
}

void ConnectionGuard::loop() {
  epoll_event events[64];
  while (!stop_) {
    Clock::time_point next = Clock::now() + std::chrono::milliseconds(250);
    for (auto& [fd, c] : conns_) next = std::min(next, c->deadline);
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
    const int n = ::epoll_wait(epoll_fd_, events, 64, int(std::max<int64_t>(0, wait) + 1));
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_fd_) {
        uint64_t v;
        [[maybe_unused]] ssize_t r = ::read(wake_fd_, &v, sizeof v);
        std::vector<std::unique_ptr<Conn>> in;
        {
          std::lock_guard<std::mutex> l(mu_);
          in.swap(incoming_);
        }
        for (auto& c : in) {
          set_blocking(c->fd, false);
          epoll_event ev{};
          ev.events = EPOLLIN | EPOLLRDHUP;
          ev.data.fd = c->fd;
          ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c->fd, &ev);
          const int cfd = c->fd;
          conns_[cfd] = std::move(c);
        }
        continue;
      }
      auto it = conns_.find(fd);
      if (it != conns_.end()) handle_readable(*it->second);
    }
    const Clock::time_point now = Clock::now();
    std::vector<int> expired;
    for (auto& [fd, c] : conns_)
      if (c->deadline <= now) expired.push_back(fd);
    for (int fd : expired) {
      auto it = conns_.find(fd);  // a conn rejected for another's budget stays; a closed one is gone
      if (it != conns_.end() && it->second->deadline <= now) window_passed(*it->second);
    }
  }
  std::vector<int> fds;
  for (auto& [fd, c] : conns_) fds.push_back(fd);
  for (int fd : fds) close_conn(*conns_[fd]);
}

void ConnectionGuard::handle_readable(Conn& c) {
  // Bytes a request may take: its head, its body, and chunk framing around a chunked body.
  const size_t cap = opt_.head.max_head_bytes + opt_.head.max_body_bytes + (64 << 10);
  char tmp[16384];
  bool eof = false;
  while (true) {
    const ssize_t n = ::recv(c.fd, tmp, sizeof tmp, 0);
    if (n > 0) {
      if (c.draining) {
        c.drained += size_t(n);
        if (c.drained > kDrainBytes) return close_conn(c);
        continue;
      }
      c.buf.append(tmp, size_t(n));
      if (c.buf.size() > cap) return reject(c, 413, "request too large");
      if (c.head.kind == HeadCheck::Ready && !account(c)) return;
      if (c.head.kind != HeadCheck::Ready && c.buf.size() > opt_.head.max_head_bytes) break;  // 431 below
      continue;
    }
    if (n == 0) eof = true;
    else if (errno == EINTR) continue;
    else if (errno != EAGAIN && errno != EWOULDBLOCK) eof = true;
    break;
  }
  if (c.draining) {
    if (eof) close_conn(c);
    return;
  }
  if (advance(c)) return;
  if (eof) close_conn(c);  // the client gave up before its request was complete
}

bool ConnectionGuard::advance(Conn& c) {
  if (c.head.kind != HeadCheck::Ready) {
    c.head = check_request_head(c.buf, opt_.head);
    if (c.head.kind == HeadCheck::Reject) {
      reject(c, c.head.status, c.head.reason);
      return true;
    }
    if (c.head.kind == HeadCheck::NeedMore) return false;
    if (!opt_.api_key.empty() && needs_key(c.head.target) &&
        !bearer_matches(c.head.authorization_fields, c.head.authorization, opt_.api_key)) {
      reject(c, 401, "missing or wrong API key");
      return true;
    }
    c.deadline = Clock::now() + seconds(opt_.body_window_s);
    if (!account(c)) return true;
    if (c.head.expect_continue) send_now(c.fd, "HTTP/1.1 100 Continue\r\n\r\n");
  }
  const std::string_view rest = std::string_view(c.buf).substr(c.head.head_bytes);
  std::string body;
  if (c.head.chunked) {
    const ChunkedCheck k = decode_chunked(rest, opt_.head.max_body_bytes, body);
    if (k.kind == ChunkedCheck::Reject) {
      reject(c, k.status, k.reason);
      return true;
    }
    if (k.kind == ChunkedCheck::NeedMore) return false;
  } else {
    if (rest.size() < c.head.content_length) return false;
    body.assign(rest.substr(0, size_t(c.head.content_length)));
  }
  GuardedRequest r{c.fd, normalized_request(std::string_view(c.buf).substr(0, c.head.head_bytes), body), c.ip, c.port};
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
  set_blocking(c.fd, true);
  unreserve(c);
  conns_.erase(c.fd);  // still open and counted: release() ends it
  dispatch_(std::move(r));
  return true;
}

void ConnectionGuard::reject(Conn& c, int status, const std::string& reason) {
  send_now(c.fd, error_response(status, reason, opt_.head.max_body_bytes));
  if (opt_.on_reject) opt_.on_reject(status);
  ::shutdown(c.fd, SHUT_WR);
  // Read what the client still sends for a moment, so its kernel does not see a reset before our answer.
  c.draining = true;
  c.buf.clear();
  c.buf.shrink_to_fit();
  c.deadline = Clock::now() + seconds(kDrainSeconds);
  unreserve(c);
}

void ConnectionGuard::unreserve(Conn& c) {
  if (c.reserved == 0) return;
  auto it = client_buffered_.find(c.ip);
  if (it != client_buffered_.end() && (it->second -= std::min(it->second, c.reserved)) == 0) client_buffered_.erase(it);
  std::lock_guard<std::mutex> l(mu_);
  buffered_ -= c.reserved;
  c.reserved = 0;
}

size_t ConnectionGuard::body_bytes(const Conn& c) const {
  const size_t got = c.buf.size() - std::min(c.buf.size(), c.head.head_bytes);
  return c.head.chunked ? got : std::min<size_t>(got, size_t(c.head.content_length));
}

bool ConnectionGuard::account(Conn& c) {
  const size_t now = body_bytes(c);
  if (now <= c.reserved) return true;
  const size_t more = now - c.reserved;
  const auto held = [this](const std::string& ip) {
    auto it = client_buffered_.find(ip);
    return it == client_buffered_.end() ? size_t(0) : it->second;
  };
  if (held(c.ip) + more > opt_.max_client_buffered_bytes) {
    reject(c, 503, "server busy: this client's request bodies are over its budget of " +
                       std::to_string(opt_.max_client_buffered_bytes) + " bytes");
    return false;
  }
  // Over the budget in all: the client holding the most is answered 503 (largest body first) until these
  // bytes fit; when that client is this one, this request is.
  while (true) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (buffered_ + more <= opt_.max_buffered_bytes) break;
    }
    std::string greedy = c.ip;
    size_t most = held(c.ip) + more;
    for (auto& [ip, n] : client_buffered_)
      if (n > most) most = n, greedy = ip;
    Conn* victim = &c;
    if (greedy != c.ip)
      for (auto& [fd, o] : conns_)
        if (o->ip == greedy && !o->draining && o->reserved > (victim == &c ? 0 : victim->reserved)) victim = o.get();
    reject(*victim, 503, "server busy: too many request bodies in flight");
    if (victim == &c) return false;
  }
  c.reserved = now;
  client_buffered_[c.ip] += more;
  std::lock_guard<std::mutex> l(mu_);
  buffered_ += more;
  return true;
}

void ConnectionGuard::window_passed(Conn& c) {
  if (c.draining) return close_conn(c);
  if (c.head.kind != HeadCheck::Ready) return reject(c, 408, "request head too slow");
  const size_t got = body_bytes(c) - c.window_start;
  const size_t per_window = size_t(opt_.min_body_bytes_per_s * opt_.body_window_s);
  size_t need = per_window;
  if (!c.head.chunked) need = std::min(need, size_t(c.head.content_length) - c.window_start);
  if (!c.first_window && got < need)
    return reject(c, 408, "request body too slow: " + std::to_string(got) + " bytes in " +
                              std::to_string(opt_.body_window_s) + " s, at least " + std::to_string(need) + " needed");
  c.first_window = false;
  c.window_start = body_bytes(c);
  c.deadline = Clock::now() + seconds(opt_.body_window_s);
}

void ConnectionGuard::close_conn(Conn& c) {
  const int fd = c.fd;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  unreserve(c);
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = per_client_.find(c.ip);
    if (it != per_client_.end() && --it->second <= 0) per_client_.erase(it);
    --open_;
  }
  conns_.erase(fd);
}

}  // namespace ernie::server
