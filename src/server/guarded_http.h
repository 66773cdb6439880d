// The HTTP library's server (cpp-httplib) behind the connection guard: its accept loop hands every socket
// to server/connection_guard.h, and each complete request is served on our own worker pool from memory,
// one request per connection. cpp-httplib (Debian's 0.11) has no limit on header count, no header deadline
// and a worker thread per connection from the first byte; the guard supplies all three, so the library only
// ever parses a request that has fully arrived and passed the framing rules.
#pragma once
#include <httplib.h>

#include <memory>
#include <string_view>

#include "server/connection_guard.h"
#include "server/event_streams.h"

namespace ernie::server {

class GuardedHttp : public httplib::Server {
 public:
  GuardedHttp(const GuardOptions& guard, const StreamLimits& streams, int workers, double write_timeout_s);
  ~GuardedHttp();
  // After httplib's stop(): ends the event streams (their last events written), closes the connections still
  // being read and waits for the workers' requests.
  void stop_guard();
  // In a route: serves `source` as this request's response, an event stream (server/event_streams.h), from the
  // streams' thread; the route returns at once and the worker is free. Beyond a cap (or off a worker) it fills
  // `res` with 503 and Retry-After instead. `extra_headers`: "Name: value\r\n" each; the headers already set on
  // `res` (a pre-routing handler's) go out too.
  void open_event_stream(httplib::Response& res, std::unique_ptr<EventSource> source,
                         const std::string& extra_headers = "");
  int event_streams_open() const { return streams_->open_count(); }
  ConnectionGuard::Counts guard_counts() const { return guard_.counts(); }

 private:
  bool process_and_close_socket(socket_t sock) override;  // the accept loop's hand-off
  void serve(GuardedRequest r);

  double write_timeout_s_;
  std::unique_ptr<httplib::ThreadPool> workers_;
  ConnectionGuard guard_;
  std::unique_ptr<EventStreams> streams_;  // after guard_: its connections are released there
};

// On a worker serving a request: its body, complete and de-chunked, as the guard read it (the HTTP library's
// content reader then goes unused); nullptr elsewhere.
const std::string_view* request_body();

// On a worker serving a request: its client has closed the connection (a synchronous generation then has no
// one to answer and is cancelled). False elsewhere.
bool client_gone();

}  // namespace ernie::server
