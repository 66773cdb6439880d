// Server-sent event streams (GET /v1/jobs/{id}/events) served from one thread, never from a request worker:
// the route hands its connection over (GuardedHttp::open_event_stream), and this thread polls every stream's
// source a few times a second, writes what it gives without blocking (epoll), sends a comment when a stream
// has been quiet for a while, and closes a stream when its source ends, its client goes away or its client
// stops reading. Streams are capped per client address and in all; beyond a cap the route answers 503 with
// Retry-After.
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ernie::server {

// One stream's events, polled on the streams' thread: poll() must not block.
class EventSource {
 public:
  virtual ~EventSource() = default;  // runs on the streams' thread (or in stop())
  // Appends the SSE text of what happened since the last call to `out`; false once the stream is over (its
  // last events appended).
  virtual bool poll(std::string& out) = 0;
};

// One event in SSE form: "id: ID\nevent: TYPE\ndata: DATA\n\n" (data on one line, as the queue's JSON is).
std::string sse_event(const std::string& id, const std::string& type, const std::string& data);

struct StreamLimits {
  int max_streams = 1024;     // open streams in all
  int max_per_client = 64;    // ... per client address
  double poll_s = 0.1;        // how often every source is polled
  double ping_s = 5;          // a comment after this long without a write finds closed connections
  size_t max_unsent_bytes = size_t(16) << 20;  // a client that reads slower than its stream: closed
};

class EventStreams {
 public:
  // `closed(ip)`: a stream's connection was closed (the connection guard's count of that client).
  EventStreams(StreamLimits limits, std::function<void(const std::string& ip)> closed);
  ~EventStreams();  // stop()
  EventStreams(const EventStreams&) = delete;
  EventStreams& operator=(const EventStreams&) = delete;

  // Takes the connection `fd` of client `ip` (its request read, nothing written yet) and serves `source` on it,
  // after a 200 head with `extra_headers` ("Name: value\r\n" each). False, with nothing taken, when a cap is
  // reached or the streams are stopping; `why` then says which.
  bool open(int fd, const std::string& ip, std::unique_ptr<EventSource> source, const std::string& extra_headers,
            std::string& why);
  // Polls every source once more, writes what it gives (for up to `grace_s`), and closes every stream.
  void stop(double grace_s = 1);
  int open_count() const;

 private:
  struct Stream;
  void loop();
  void poll_all(bool final);
  void flush(Stream& s);
  void close_stream(int fd);

  StreamLimits lim_;
  std::function<void(const std::string&)> closed_;
  int epoll_fd_ = -1, wake_fd_ = -1;
  std::atomic<bool> stop_{false};
  double grace_s_ = 1;
  mutable std::mutex mu_;  // guards the counts and incoming_
  std::map<std::string, int> per_client_;
  int open_ = 0;
  std::vector<std::unique_ptr<Stream>> incoming_;
  std::map<int, std::unique_ptr<Stream>> streams_;  // the thread's own
  std::thread thread_;
};

}  // namespace ernie::server
