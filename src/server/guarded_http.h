// The HTTP library's server (cpp-httplib) behind the connection guard: its accept loop hands every socket
// to server/connection_guard.h, and each complete request is served on our own worker pool from memory,
// one request per connection. cpp-httplib (Debian's 0.11) has no limit on header count, no header deadline
// and a worker thread per connection from the first byte; the guard supplies all three, so the library only
// ever parses a request that has fully arrived and passed the framing rules.
#pragma once
#include <httplib.h>

#include <memory>

#include "server/connection_guard.h"

namespace ernie::server {

class GuardedHttp : public httplib::Server {
 public:
  GuardedHttp(const GuardOptions& guard, int workers, double write_timeout_s);
  ~GuardedHttp();
  // After httplib's stop(): closes the connections still being read and waits for the workers' requests.
  void stop_guard();
  ConnectionGuard::Counts guard_counts() const { return guard_.counts(); }

 private:
  bool process_and_close_socket(socket_t sock) override;  // the accept loop's hand-off
  void serve(GuardedRequest r);

  double write_timeout_s_;
  std::unique_ptr<httplib::ThreadPool> workers_;
  ConnectionGuard guard_;
};

// On a worker serving a request: its client has closed the connection (a synchronous generation then has no
// one to answer and is cancelled). False elsewhere.
bool client_gone();

}  // namespace ernie::server
