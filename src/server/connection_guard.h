// What stands between an accepted socket and the HTTP library: one event thread (epoll) reads each request
// in full, its head under server/http_head.h's rules and a deadline, its body at a minimum rate, and only
// then hands it to a worker. A slow or hostile client therefore holds a few bytes of buffer, never a worker
// thread, and /health keeps answering. With an API key, a /v1 request without it is answered 401 as soon as its
// head has arrived, before any of its body is read. Limits: connections per client address and in all; body
// bytes buffered per client and in all, counted as they arrive (never as announced); a body's progress (at
// least min_body_bytes_per_s * body_window_s bytes in every window after the first). Whatever breaks a rule gets
// its status (400, 401, 408, 413, 431, 501, 503) and is closed. When the bytes in all would pass their budget,
// the client holding the most is the one answered 503, never another.
#pragma once
#include <atomic>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/http_head.h"

namespace ernie::server {

struct GuardOptions {
  HeadLimits head;
  double head_timeout_s = 10;         // from accept to the head's blank line
  double body_window_s = 2;           // the body's progress is checked once per window, the first one free
  double min_body_bytes_per_s = 16384;  // ... and must bring this rate's bytes per window (or the rest of the body)
  int max_per_client = 256;           // open connections per client address (being read or being served)
  int max_connections = 1024;         // open connections in all
  size_t max_buffered_bytes = size_t(64) << 20;         // body bytes being read, in all (at least one body)
  size_t max_client_buffered_bytes = size_t(32) << 20;  // ... per client address (at least one body)
  std::string api_key;                // non-empty: /v1 requests need `Authorization: Bearer KEY`
  std::function<void(int status)> on_reject;  // each request answered here (metrics), on the guard's thread
};

// A complete request, ready for the HTTP library: the socket (blocking again) and the normalized bytes
// (http_head.h normalized_request). The receiver serves it, closes the socket and calls release().
struct GuardedRequest {
  int fd = -1;
  std::string bytes;
  std::string peer_ip;
  int peer_port = 0;
};

class ConnectionGuard {
 public:
  using Dispatch = std::function<void(GuardedRequest)>;
  ConnectionGuard(GuardOptions opt, Dispatch dispatch);
  ~ConnectionGuard();  // stop()
  ConnectionGuard(const ConnectionGuard&) = delete;
  ConnectionGuard& operator=(const ConnectionGuard&) = delete;

  // Takes ownership of an accepted socket; returns at once (a client over its limits is answered 503).
  void admit(int fd);
  // A dispatched request's connection was closed: its client may open another.
  void release(const std::string& peer_ip);
  // Closes every connection still being read; admit() then closes what it gets.
  void stop();

  struct Counts {
    int open = 0, reading = 0;
    size_t buffered = 0;
  };
  Counts counts() const;

 private:
  struct Conn;
  void loop();
  void handle_readable(Conn& c);
  bool advance(Conn& c);  // true: finished (dispatched or rejected)
  bool account(Conn& c);  // counts the body bytes that arrived in the budgets; false: c was rejected
  void window_passed(Conn& c);  // its deadline: a head too slow, or the end of a body window
  void unreserve(Conn& c);
  size_t body_bytes(const Conn& c) const;
  void reject(Conn& c, int status, const std::string& reason);
  void close_conn(Conn& c);  // drops it from the loop and the counts

  GuardOptions opt_;
  Dispatch dispatch_;
  int epoll_fd_ = -1, wake_fd_ = -1;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;                 // guards the counts and incoming_
  std::map<std::string, int> per_client_;
  int open_ = 0;
  size_t buffered_ = 0;
  std::map<std::string, size_t> client_buffered_;  // the event thread's own
  std::vector<std::unique_ptr<Conn>> incoming_;
  std::map<int, std::unique_ptr<Conn>> conns_;  // the event thread's own
  std::thread thread_;
};

}  // namespace ernie::server
