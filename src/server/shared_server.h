// `ernie-image serve --queue redis://HOST:PORT[/DB] --role all|api|worker`: the HTTP API over the job queue
// that many servers share through Redis (issue 27; the queue is server/redis_queue.h, the design and its
// failure semantics are docs/scale-out.md).
//   api     validates requests, stores jobs and answers every /v1 route from Redis, for every job whichever
//           node took it: status, events (SSE ids are the job's event-stream ids, so Last-Event-ID resumes on
//           any node), images. It loads no model: /v1/info and /v1/models come from what workers publish.
//   worker  loads the model and runs jobs from the consumer group (server/engine_runner.h); its HTTP port
//           answers /health and /metrics only.
//   all     both in one process.
// /health is 503 while Redis cannot be reached (and while shutting down); /metrics adds the shared queue's
// depth and this node's worker (server/redis_metrics.h). The routes and bodies are those of server.h.
#pragma once
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "engine/engine.h"
#include "server/http_common.h"
#include "server/redis_queue.h"
#include "server/request_parse.h"

namespace ernie::server {

enum class NodeRole { All, Api, Worker };
NodeRole parse_node_role(const std::string& s);  // "all", "api", "worker"; throws Error
const char* role_name(NodeRole r);

struct SharedServerOptions {
  HttpOptions http;
  std::string api_key;             // empty: no key needed
  ParseLimits limits;
  RedisUrl redis;
  RedisQueueOptions queue;         // key prefix, --job-lease, --max-attempts, result TTL
  NodeRole role = NodeRole::All;
  long long max_unclaimed = 1000;  // jobs no worker has taken yet; more -> 429
  bool log_jobs = false;
};

class SharedServer {
 public:
  // `engine`: the worker's model (role all or worker); null for an api node.
  SharedServer(std::unique_ptr<Engine> engine, SharedServerOptions opt);
  ~SharedServer();

  int bind();  // returns the port
  void run();  // serves until shutdown()
  // New work gets 503; the worker finishes its job within `grace_s` seconds, or the job goes back to the queue
  // for another worker; open event streams end; run() returns.
  void shutdown(double grace_s);
  int port() const { return port_; }

 private:
  class Pool;
  void api_routes();
  void common_routes();
  void publish_loop();  // a worker (re)publishes its model description every few seconds
  nlohmann::json published_model();  // what workers published, cached for a second; null when none yet
  nlohmann::json describe(const RedisJobStatus& s) const;
  void handle_generations(const httplib::Request& req, httplib::Response& res, const ParsedRequest& p);
  std::string submit(ParsedRequest p);
  RedisJobStatus job(const std::string& id);  // its status, or a 404
  // A finished job's images (index < 0: all): 409 while it runs or when it failed, 410 once they expired.
  std::vector<std::string> images(const RedisJobStatus& s, int index);
  void handle_events(const httplib::Request& req, httplib::Response& res, const std::string& id);
  bool authorized(const httplib::Request& req) const { return bearer_ok(req, opt_.api_key); }

  SharedServerOptions opt_;
  Metrics metrics_;
  std::unique_ptr<Engine> engine_;     // before worker_: the worker's runner uses it
  nlohmann::json model_json_;          // a worker's description of its model (published to Redis)
  std::unique_ptr<Pool> pool_;         // api connections, one per request at a time
  std::unique_ptr<RedisWorker> worker_;
  std::unique_ptr<RedisClient> health_;  // PING for /health and /metrics
  std::unique_ptr<RedisQueue> stream_queue_;  // the event streams' reads, on their thread only
  std::chrono::steady_clock::time_point redis_away_until_{};  // ... which pause after a Redis failure
  std::unique_ptr<GuardedHttp> http_;
  std::atomic<bool> stopping_{false}, abandon_{false}, closing_{false};
  std::atomic<int> streams_open_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  nlohmann::json cached_model_;
  std::chrono::steady_clock::time_point cached_at_{};
  std::thread publisher_;
  std::string node_;  // "HOST-PID": every response's X-Served-By (which node answered, behind a proxy)
  int port_ = 0;
};

}  // namespace ernie::server
