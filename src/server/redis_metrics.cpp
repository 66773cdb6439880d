#include "server/redis_metrics.h"

namespace ernie::server {

namespace {

void line(std::string& out, const std::string& name, const char* type, const std::string& help,
          const std::string& labels, long long v) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  out += name + labels + " " + std::to_string(v) + "\n";
}

std::string label_value(const std::string& s) {  // Prometheus label escaping: backslash, quote, newline
  std::string o;
  for (char c : s) {
    if (c == '\\' || c == '"') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o;
}

}  // namespace

void render_redis_metrics(std::string& out, const std::optional<RedisQueueDepth>& depth, const RedisWorker* worker) {
  line(out, "ernie_redis_up", "gauge", "Whether the shared queue's Redis answered this scrape", "", depth ? 1 : 0);
  if (depth) {
    line(out, "ernie_shared_queue_length", "gauge", "Jobs waiting or running in the shared queue (XLEN)", "",
         depth->length);
    line(out, "ernie_shared_queue_pending", "gauge", "Jobs a worker holds (XPENDING of the workers group)", "",
         depth->pending);
    line(out, "ernie_shared_queue_unclaimed", "gauge", "Jobs no worker has taken yet (XLEN - XPENDING)", "",
         depth->unclaimed);
    line(out, "ernie_shared_queue_busy_workers", "gauge", "Workers holding a job", "", depth->consumers);
  }
  if (worker) {
    const std::string l = "{worker=\"" + label_value(worker->consumer()) + "\"}";
    line(out, "ernie_worker_busy", "gauge", "Whether this node's worker is running a job", l, worker->busy() ? 1 : 0);
    const std::pair<const char*, uint64_t> counts[] = {
        {"succeeded", worker->succeeded.load()}, {"failed", worker->failed.load()},
        {"retried", worker->retried.load()},     {"cancelled", worker->cancelled.load()},
        {"lost", worker->lost.load()},
    };
    out += "# HELP ernie_worker_jobs_total Jobs this node's worker ended, by outcome (lost: taken over by another "
           "worker)\n# TYPE ernie_worker_jobs_total counter\n";
    for (const auto& [k, v] : counts)
      out += "ernie_worker_jobs_total{worker=\"" + label_value(worker->consumer()) + "\",outcome=\"" + k + "\"} " +
             std::to_string(v) + "\n";
    out += "# HELP ernie_worker_claims_total Jobs this node's worker took, by attempt (first run, retry after a "
           "retryable failure, or reclaimed from a worker that stopped renewing its lease)\n"
           "# TYPE ernie_worker_claims_total counter\n";
    const std::pair<const char*, uint64_t> claims[] = {{"first", worker->claims_first.load()},
                                                        {"retry", worker->claims_retry.load()},
                                                        {"reclaimed", worker->claims_reclaimed.load()}};
    for (const auto& [k, v] : claims)
      out += "ernie_worker_claims_total{worker=\"" + label_value(worker->consumer()) + "\",attempt=\"" + k + "\"} " +
             std::to_string(v) + "\n";
    line(out, "ernie_worker_redis_errors_total", "counter", "Redis failures this node's worker waited out", l,
         static_cast<long long>(worker->redis_errors.load()));
  }
}

}  // namespace ernie::server
