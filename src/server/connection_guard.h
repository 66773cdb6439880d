// What stands between an accepted socket and the HTTP library: one event thread (epoll) reads each request
// in full, its head under server/http_head.h's rules and a deadline, its body at a minimum rate, and only
// then hands it to a worker. A slow or hostile client therefore holds a few bytes of buffer, never a worker
// thread, and /health keeps answering. Limits: connections per client address and in all, bytes buffered
// for bodies in all. Whatever breaks a rule gets its status (400, 408, 413, 431, 501, 503) and is closed.
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
  double min_body_bytes_per_s = 16384;  // the body's deadline: head_timeout_s + length / this, after the head
  int max_per_client = 256;           // open connections per client address (being read or being served)
  int max_connections = 1024;         // open connections in all
  size_t max_buffered_bytes = size_t(64) << 20;  // bodies being read, in all
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
  std::vector<std::unique_ptr<Conn>> incoming_;
  std::map<int, std::unique_ptr<Conn>> conns_;  // the event thread's own
  std::thread thread_;
};

}  // namespace ernie::server
