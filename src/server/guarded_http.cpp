#include "server/guarded_http.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "server/api_error.h"

namespace ernie::server {
namespace {

thread_local int tl_client_fd = -1;
// The request a worker is serving: its connection, and whether an event stream has taken it.
struct Serving {
  const GuardedRequest* r = nullptr;
  bool taken = false;
  std::string_view body;
};
thread_local Serving* tl_serving = nullptr;

// httplib's accept loop runs each task at once: the hand-off to the guard never blocks.
class InlineQueue : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

// A request that has fully arrived, read from memory; the response is written to the socket.
class BufferedStream : public httplib::Stream {
 public:
  BufferedStream(const GuardedRequest& r, int write_timeout_ms, const bool& taken)
      : fd_(r.fd), data_(r.bytes), ip_(r.peer_ip), port_(r.peer_port), timeout_ms_(write_timeout_ms), taken_(taken) {}
  bool is_readable() const override { return pos_ < data_.size(); }
  bool is_writable() const override {
    pollfd p{fd_, POLLOUT, 0};
    return ::poll(&p, 1, timeout_ms_) > 0 && (p.revents & (POLLERR | POLLHUP)) == 0;
  }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, data_.size() - pos_);
    std::memcpy(ptr, data_.data() + pos_, n);
    pos_ += n;
    return ssize_t(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (taken_) return ssize_t(size);  // an event stream owns the connection: the library's response is dropped
    size_t off = 0;
    while (off < size) {
      if (!is_writable()) return -1;
      const ssize_t n = ::send(fd_, ptr + off, size - off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) return -1;
      off += size_t(n);
    }
    return ssize_t(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = ip_;
    port = port_;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = "";
    port = 0;
  }
  socket_t socket() const override { return fd_; }

 private:
  int fd_;
  const std::string& data_;
  size_t pos_ = 0;
  std::string ip_;
  int port_;
  int timeout_ms_;
  const bool& taken_;
};

}  // namespace

GuardedHttp::GuardedHttp(const GuardOptions& guard, const StreamLimits& streams, int workers, double write_timeout_s)
    : write_timeout_s_(write_timeout_s),
      workers_(std::make_unique<httplib::ThreadPool>(size_t(std::max(1, workers)))),
      guard_(guard,
             [this](GuardedRequest r) {
               auto shared = std::make_shared<GuardedRequest>(std::move(r));
               workers_->enqueue([this, shared] { serve(std::move(*shared)); });
             }),
      streams_(std::make_unique<EventStreams>(streams, [this](const std::string& ip) { guard_.release(ip); })) {
  new_task_queue = [] { return new InlineQueue; };
  // SO_REUSEADDR only: cpp-httplib also sets SO_REUSEPORT, with which a second server on a busy port binds
  // too and the kernel splits the connections between the two silently.
  set_socket_options([](socket_t sock) {
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
}

GuardedHttp::~GuardedHttp() { stop_guard(); }

void GuardedHttp::stop_guard() {
  streams_->stop();
  guard_.stop();
  if (!workers_) return;
  workers_->shutdown();
  workers_.reset();
}

bool GuardedHttp::process_and_close_socket(socket_t sock) {
  guard_.admit(sock);
  return true;
}

void GuardedHttp::serve(GuardedRequest r) {
  Serving serving{&r, false, {}};
  if (const size_t end = r.bytes.find("\r\n\r\n"); end != std::string::npos)
    serving.body = std::string_view(r.bytes).substr(end + 4);  // normalized_request: the head, then the body
  {
    BufferedStream s(r, int(write_timeout_s_ * 1000), serving.taken);
    tl_client_fd = r.fd;
    tl_serving = &serving;
    bool closed = false;
    process_request(s, /*close_connection=*/true, closed, nullptr);
    tl_serving = nullptr;
    tl_client_fd = -1;
  }
  if (serving.taken) return;  // the event streams' thread closes and releases it
  ::shutdown(r.fd, SHUT_WR);
  ::close(r.fd);
  guard_.release(r.peer_ip);
}

void GuardedHttp::open_event_stream(httplib::Response& res, std::unique_ptr<EventSource> source,
                                    const std::string& extra_headers) {
  std::string why = "not on a request worker";
  std::string head = extra_headers;  // and those the server set before the route (X-Served-By)
  for (const auto& [name, value] : res.headers) head += name + ": " + value + "\r\n";
  if (tl_serving && !tl_serving->taken &&
      streams_->open(tl_serving->r->fd, tl_serving->r->peer_ip, std::move(source), head, why)) {
    tl_serving->taken = true;
    res.status = 200;  // for the log and the metrics; the streams' thread writes the head
    return;
  }
  res.status = 503;
  res.set_header("Retry-After", "5");
  res.set_content(ApiError{503, why, "server_error", "", "too_many_streams"}.to_json().dump(), "application/json");
}

const std::string_view* request_body() { return tl_serving ? &tl_serving->body : nullptr; }

bool client_gone() {
  if (tl_client_fd < 0) return false;
  pollfd p{tl_client_fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
  char c;
  return ::recv(tl_client_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

}  // namespace ernie::server
