// `ernie-image serve`: the HTTP API and web page over one loaded Engine.
//   POST   /v1/images/generations   OpenAI Images compatible; waits and returns b64_json PNGs (or URLs)
//   POST   /v1/jobs                 queues the same body, returns {id} at once (202)
//   GET    /v1/jobs                 the job records, newest first (the history, for the page's gallery)
//   GET    /v1/jobs/{id}            status, phase, step/total
//   GET    /v1/jobs/{id}/events     server-sent events: queued, progress (and preview)..., done | error | cancelled
//   DELETE /v1/jobs/{id}            cancels a waiting or running job; frees a finished one
//   GET    /v1/jobs/{id}/images     every image (JSON, b64), until the history evicts them
//   GET    /v1/jobs/{id}/images/{i} one image as image/png, likewise
//   GET    /v1/files/{job}-{i}.png  the same PNG by the URL of response_format "url"
//   GET    /v1/models, /v1/info     the model, its supported sizes and defaults
//   GET    /health, /metrics        liveness; Prometheus text
//   GET    /                        the web page
// Errors use the OpenAI shape (api_error.h). With an API key every /v1 route needs
// `Authorization: Bearer KEY`.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "server/connection_guard.h"
#include "server/event_streams.h"
#include "server/form_data.h"
#include "server/job_queue.h"
#include "server/request_parse.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace ernie::server {

class GuardedHttp;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                     // 0: any free port (tests)
  std::string api_key;                 // empty: no key needed
  size_t max_body_bytes = size_t(16) << 20;  // larger bodies -> 413 (an img2img PNG fits)
  int http_threads = 32;               // requests served at once (event streams hold none)
  GuardOptions guard;                  // limits on connections and request framing (connection_guard.h)
  StreamLimits streams;                // limits on event streams (event_streams.h)
  QueueOptions queue;
  ParseLimits limits;
  bool log_requests = true;            // one line per request on stderr
};

class Server {
 public:
  Server(std::unique_ptr<Engine> pipeline, ServerOptions opt);
  ~Server();

  // Binds the socket; returns the port (the chosen one when port is 0). Throws Error when it cannot.
  int bind();
  // Serves until stop() (blocking). Call bind() first.
  void run();
  // Graceful stop: new work gets 503, waiting jobs are cancelled, the running batch gets `grace_s`
  // seconds to finish before it is cancelled, open event streams end, then run() returns.
  void shutdown(double grace_s);

  JobQueue& queue() { return *queue_; }
  int port() const { return port_; }

 private:
  void routes();
  bool authorized(const httplib::Request& req) const;
  // POST /v1/images/generations and /v1/images/edits: `parse` reads the body (JSON, or the edit's form).
  void handle_generations(const httplib::Request& req, httplib::Response& res,
                          const std::function<ParsedRequest()>& parse);
  void handle_submit(const httplib::Request& req, httplib::Response& res, const std::string& body);
  void handle_events(const httplib::Request& req, httplib::Response& res, const JobPtr& job);
  // A parsed request with its seed drawn (when not given) and resolved by the engine; errors are 400s.
  GenerateRequest resolve_parsed(ParsedRequest p) const;
  nlohmann::json model_info() const;

  ServerOptions opt_;
  Metrics metrics_;
  std::unique_ptr<JobQueue> queue_;
  std::unique_ptr<GuardedHttp> http_;
  std::atomic<bool> closing_{false};  // event streams end
  std::atomic<int> streams_open_{0};
  int port_ = 0;
  std::string model_name_;
  EngineInfo info_;  // how the engine was loaded (its memory plan), for /health and /v1/info
};


}  // namespace ernie::server
