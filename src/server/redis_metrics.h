// The shared queue's lines for GET /metrics (Prometheus text format 0.0.4): the queue depth read from Redis
// (XLEN and XPENDING of the jobs stream, see RedisQueue::depth), whether Redis answers, and this node's
// worker: busy or not, and its counts of ended jobs.
#pragma once
#include <optional>
#include <string>

#include "server/redis_queue.h"

namespace ernie::server {

// `depth`: nothing when Redis could not be read (the depth lines are left out, ernie_redis_up is 0).
// `worker`: nothing on an api-only node.
void render_redis_metrics(std::string& out, const std::optional<RedisQueueDepth>& depth,
                          const RedisWorker* worker);

}  // namespace ernie::server
