// The job queue shared by many servers through Redis (issue 27): api nodes submit jobs and answer status,
// events and results for every job; worker nodes take jobs from a consumer group and run them. Nothing
// here knows the engine: a job's request is JSON text and its result is a list of byte strings (PNGs).
//
// Keys (all under `prefix`, "ernie:" by default):
//   {p}jobs              stream, one entry {job: ID} per job waiting or running; consumer group "workers"
//   {p}job:ID            hash: request, status (queued|running|succeeded|failed|cancelled), attempts, owner,
//                        cancel (0|1), error (the final error), last_error, entry (its id in {p}jobs), step,
//                        total, created_ms, finished_ms
//   {p}job:ID:events     stream of {type, data}: queued, running, progress..., retry, then done | error |
//                        cancelled. Entry ids ("1733300000000-0") are the SSE event ids: Last-Event-ID resumes
//                        on any node.
//   {p}job:ID:result     hash {count, 0, 1, ..., info, attempt, worker}: the one result set, with a TTL
//   {p}recent            sorted set of job ids by submission time (GET /v1/jobs), the newest `max_recent`
//   {p}model             the model the workers serve, as JSON (publish_model; api nodes answer /v1/info from it)
//   {p}stats:result_sets counter of result sets ever written (a test counts duplicates with it)
//
// Failure semantics:
// - A worker takes a job with XREADGROUP; the entry stays pending (XPENDING) until the job ends. While it
//   runs, the worker refreshes its lease (heartbeat: XCLAIM ... JUSTID resets the entry's idle time).
// - A worker that stops refreshing (crashed, hung, cut off) leaves the entry idle; after `lease` another
//   worker takes it over with XAUTOCLAIM and runs the job again (attempt + 1, last_error says the worker
//   was lost). So a job runs at least once, possibly more than once.
// - Every end of a job (result stored, failed, cancelled) is one WATCH/MULTI/EXEC on the job's hash and
//   result key: it happens only if the job has not already ended, and it XACKs and XDELs the stream entry in
//   the same transaction, after the result is written. A job that ran twice still has one result set and
//   one final event; the later finisher only acknowledges.
// - A job taken `max_attempts` times without finishing fails with its last error. A retryable failure
//   (fail(..., retryable=true)) puts the job back at the end of the stream, until max_attempts.
// - cancel() sets the job's cancel flag (a queued job turns cancelled at once); a worker sees the flag in
//   progress() and heartbeat(), between steps, and then ends the job with cancelled().
// - Redis calls go through RedisClient, which reconnects with capped exponential backoff.
// - Depth: XLEN of {p}jobs counts jobs waiting or running (ended ones are deleted); XPENDING counts those a
//   worker holds; their difference is the jobs no worker has taken yet.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "server/redis_client.h"

namespace ernie::server {

struct RedisQueueOptions {
  std::string prefix = "ernie:";
  std::string consumer;                       // this worker's name in the group (default: host-pid-random)
  std::chrono::milliseconds lease{30000};     // --job-lease: idle time after which a job is taken over
  int max_attempts = 3;                       // --max-attempts
  std::chrono::seconds result_ttl{900};       // how long a result set is kept
  std::chrono::seconds record_ttl{3600};      // how long an ended job's hash and events are kept
  size_t max_events = 10000;                  // per job (XADD MAXLEN ~)
  size_t max_recent = 1000;                   // job ids kept in {p}recent
  RedisClientOptions client;
};

struct RedisJobStatus {
  std::string id, status, owner, error, last_error, request;
  std::string info;  // the result's description (JSON text, complete()'s `info`); empty until it succeeded
  int attempts = 0, step = 0, total = 0;
  long long created_ms = 0, finished_ms = 0;  // Unix time in ms; finished_ms 0 while it has not ended
  bool cancel_requested = false;
  bool has_result = false;
};

struct RedisJobEvent {
  std::string id;  // the stream entry id: the SSE event id
  std::string type, data;
};

struct RedisQueueDepth {
  long long length = 0;     // XLEN: jobs waiting or running
  long long pending = 0;    // XPENDING: jobs a worker holds
  long long unclaimed = 0;  // length - pending: jobs no worker has taken yet
  long long consumers = 0;  // consumers known to the group
};

// A job a worker holds.
struct RedisClaim {
  std::string id, entry, request;
  int attempt = 0;         // 1 for the first run
  bool reclaimed = false;  // taken over from a worker that stopped refreshing its lease
};

class RedisQueue {
 public:
  explicit RedisQueue(const RedisUrl& url, RedisQueueOptions opt = {});
  ~RedisQueue();

  const RedisQueueOptions& options() const { return opt_; }
  RedisClient& client() { return client_; }

  // ---- api side ----
  // Stores the job (request JSON, status queued, a `queued` event) and appends it to the stream, in one
  // transaction; `id` empty: a new random id. Safe to repeat: a job already stored is left alone.
  std::string submit(const std::string& request_json, std::string id = {});
  std::optional<RedisJobStatus> status(const std::string& id);
  // Events after `after` ("0" or "" for all), up to `count`; waits up to `block` for the first (0: no wait;
  // at most the client's command timeout less a second). A malformed `after` throws RedisError(Reply).
  std::vector<RedisJobEvent> events_since(const std::string& id, const std::string& after,
                                          std::chrono::milliseconds block = {}, size_t count = 100);
  std::optional<std::vector<std::string>> result(const std::string& id);
  // Job ids, newest first, at most `limit` (ids whose records expired are left out by the caller's status()).
  std::vector<std::string> recent(size_t limit);
  // Deletes an ended job's record, events and result (DELETE on a finished job); false when it has not ended.
  bool remove(const std::string& id);
  // The model description the workers publish (JSON text) for api nodes; nothing until a worker has started.
  void publish_model(const std::string& json);
  std::optional<std::string> model();
  enum class CancelResult { NotFound, AlreadyEnded, Cancelled, Requested };
  // Queued: cancelled at once. Running: the flag is set and the worker stops at its next step.
  CancelResult cancel(const std::string& id);
  RedisQueueDepth depth();
  long long result_sets_written();

  // ---- worker side ----
  // Takes a job: first one whose lease ran out (XAUTOCLAIM), else a new one (XREADGROUP, waiting up to
  // `block`). Jobs found already ended, cancelled, or out of attempts are settled on the way and skipped.
  std::optional<RedisClaim> claim(std::chrono::milliseconds block);
  struct Beat {
    bool owned = true;       // false: another worker took the job over; stop working on it
    bool cancelled = false;  // the cancel flag is set
  };
  // Refreshes the lease of a held job.
  Beat heartbeat(const RedisClaim& c);
  // A progress event (step of total), written only while the job is running on this worker (one Lua script:
  // a job that is gone is never recreated). owned false: the job is gone or another worker holds it; stop.
  Beat progress(const RedisClaim& c, int step, int total);
  // Stored: this call ended the job. Requeued: fail(retryable) put it back for another attempt.
  // AlreadyEnded: the job had ended before (another run of it); the call only acknowledged.
  enum class Finish { Stored, Requeued, AlreadyEnded };
  // Stores the result set (idempotent) with `info` (a JSON object's text, merged into the `done` event and kept
  // as the job's `info`), ends the job as succeeded and acknowledges it.
  Finish complete(const RedisClaim& c, const std::vector<std::string>& results, const std::string& info = "{}");
  // Ends the job as failed with `error`; a retryable error re-queues it while attempts remain.
  Finish fail(const RedisClaim& c, const std::string& error, bool retryable = false);
  Finish cancelled(const RedisClaim& c);

  // Makes blocked and retrying calls give up (shutdown).
  void stop() { client_.stop(); }

  std::string key_job(const std::string& id) const { return opt_.prefix + "job:" + id; }
  std::string key_events(const std::string& id) const { return opt_.prefix + "job:" + id + ":events"; }
  std::string key_result(const std::string& id) const { return opt_.prefix + "job:" + id + ":result"; }
  std::string key_stream() const { return opt_.prefix + "jobs"; }
  std::string key_recent() const { return opt_.prefix + "recent"; }
  static constexpr const char* kGroup = "workers";

 private:
  std::chrono::milliseconds max_block() const;  // the longest BLOCK below the client's read timeout
  void ensure_group(RedisClient::Conn& c);
  std::optional<RedisClaim> settle_claim(const std::string& id, const std::string& entry, bool reclaimed);
  Finish end_job(const RedisClaim& c, const std::string& status, const std::vector<std::string>* results,
                 const std::string& error, bool requeue, const std::string& info = "{}");
  RedisArgs event_cmd(const std::string& id, const std::string& type, const std::string& data) const;
  std::vector<RedisArgs> ack_cmds(const std::string& entry) const;

  RedisQueueOptions opt_;
  RedisClient client_;
  bool group_ready_ = false;
  std::string autoclaim_cursor_ = "0-0";
};

// Keeps a held job's lease fresh from a thread of its own (every lease/3) until destroyed or released,
// and remembers whether the job was lost or cancelled. Uses its own connection.
class RedisLeaseKeeper {
 public:
  RedisLeaseKeeper(const RedisUrl& url, const RedisQueueOptions& opt, RedisClaim claim);
  ~RedisLeaseKeeper();
  void release();  // stops refreshing (a worker that dies mid-job does not call complete())
  bool lost() const { return lost_.load(); }
  bool cancel_seen() const { return cancelled_.load(); }
  uint64_t beats() const { return beats_.load(); }

 private:
  RedisQueue q_;
  RedisClaim claim_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<bool> lost_{false}, cancelled_{false};
  std::atomic<uint64_t> beats_{0};
  std::thread thread_;
};

// Thrown by a RedisWorker's runner for a failure worth another attempt (out of device memory, say); the job
// goes back to the queue while attempts remain. Any other exception fails the job with its message.
class RedisRetryableError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What a runner made of a job: the images (PNG bytes) and their description (a JSON object's text).
struct RedisResult {
  std::vector<std::string> images;
  std::string info = "{}";
};

// A worker node's loop on a thread of its own: claim a job, keep its lease, run it, end it. The runner gets
// the claim and a progress function to call between steps; when that returns true (cancel requested, or
// the job was taken over) the runner should return early. A runner's result after a cancel is dropped.
class RedisWorker {
 public:
  using Progress = std::function<bool(int step, int total)>;
  using Runner = std::function<RedisResult(const RedisClaim&, const Progress&)>;
  RedisWorker(const RedisUrl& url, RedisQueueOptions opt, Runner run);
  ~RedisWorker();  // stop() and join
  void start();
  void stop();     // finishes the job at hand (the runner sees no stop) and returns from the loop
  bool busy() const { return busy_.load(); }
  const std::string& consumer() const { return q_.options().consumer; }
  std::atomic<uint64_t> succeeded{0}, failed{0}, retried{0}, cancelled{0}, lost{0}, redis_errors{0};
  // Jobs this worker took, by attempt: its first run, a retry after a retryable failure, or a takeover
  // from a worker that stopped renewing its lease.
  std::atomic<uint64_t> claims_first{0}, claims_retry{0}, claims_reclaimed{0};

 private:
  void loop();
  void run_one(const RedisClaim& c);
  RedisUrl url_;
  RedisQueue q_;
  Runner run_;
  std::atomic<bool> stop_{false}, busy_{false};
  std::thread thread_;
};

}  // namespace ernie::server
