// The server's jobs: a FIFO of waiting requests, one worker thread that runs them on the Engine (in
// batches when that is faster, see batching.h), live progress events (and latent previews, see
// engine/latent_preview.h), cancellation between steps, and a history of finished jobs whose images may be
// fetched any number of times until evicted. Memory is bounded: at most `max_queue` waiting jobs, the images
// of at most `history` finished jobs and `history_bytes` bytes of PNGs (the oldest are evicted first; the
// newest job is always kept), at most `max_records` job records (status only) after their images are gone.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "server/api_error.h"
#include "server/batching.h"
#include "server/metrics.h"

namespace ernie::server {

using Clock = std::chrono::steady_clock;

enum class JobState { Queued, Running, Succeeded, Failed, Cancelled };
const char* state_name(JobState s);
// The name of image `index` of a job under /v1/files/: "job_…-INDEX.png".
std::string file_name(const std::string& job_id, int index);
inline bool is_terminal(JobState s) { return s != JobState::Queued && s != JobState::Running; }

struct JobEvent {
  int64_t id = 0;     // 1, 2, ... per job (SSE `id:`)
  std::string type;   // "queued", "progress", "preview", "done", "error", "cancelled"
  std::string data;   // JSON text
};

// Everything below is guarded by the JobQueue's mutex.
struct Job {
  std::string id;
  GenerateRequest req;  // resolved
  Clock::time_point created, started, finished;
  int64_t created_unix = 0;
  JobState state = JobState::Queued;
  std::string phase;              // "start", then the pipeline's: "encode", "denoise", "decode", ...
  int step = 0, total = 0;        // denoising steps done / to do
  std::vector<JobEvent> events;
  int64_t last_event_id = 0;      // ids keep increasing though old previews and progress events are dropped
  std::optional<ApiError> error;  // failed or cancelled: why
  std::vector<std::string> png;   // encoded images, kept while the job is in the history
  size_t png_bytes = 0;
  bool released = false;          // images gone (evicted from the history, deleted, or never made)
  std::string gone_why;           // released: why, for the 410
  int listeners = 0;              // open event streams (previews are made only while someone listens)
  std::string revised_prompt;
  bool truncated = false;  // the prompt was cut at the tokenizer's limit
  double encode_s = 0, denoise_s = 0, decode_s = 0, lora_switch_s = 0;
  int batch_size = 1;             // requests in the pipeline call that ran it
};
using JobPtr = std::shared_ptr<Job>;

struct QueueOptions {
  int max_queue = 16;          // waiting jobs; more -> 429
  int history = 50;            // finished jobs whose images are kept (serve --history); the oldest are evicted
  size_t history_bytes = size_t(512) << 20;  // and at most this many bytes of PNGs (serve --history-mib)
  bool preview = true;         // `preview` events with a latent-to-RGB image per step (serve --preview fast)
  size_t max_records = 512;    // job records (status only) kept after their images are gone
  double record_ttl_s = 3600;
  BatchPolicy batch;           // max_images is taken from the pipeline unless set lower
  bool batching = true;        // false: every request runs alone (serve --max-vram plans for one request)
  std::string model_name;      // for the PNG metadata
  bool log_jobs = false;       // one line per finished job on stderr (id, size, steps, status, duration)
};

class JobQueue {
 public:
  JobQueue(std::unique_ptr<Engine> pipeline, QueueOptions opt, Metrics& metrics);
  ~JobQueue();  // cancels what is left and joins the worker

  const Engine& pipeline() const { return *pipeline_; }
  int max_batch_images() const { return opt_.batch.max_images; }  // images one pipeline call may take

  // Queues a resolved request; throws ApiException: 429 queue full, 503 shutting down.
  JobPtr submit(const GenerateRequest& resolved);
  JobPtr find(const std::string& id) const;

  // Status as the API shows it.
  nlohmann::json describe(const Job& j) const;

  // Cancels a waiting or running job (it turns `cancelled` at once; the pipeline stops at its next step
  // when no other request shares its batch). Returns false when the job had already finished.
  bool cancel(const JobPtr& j, const ApiError& why);
  // Releases a finished job's images and record (DELETE on a finished job).
  void remove(const JobPtr& j);

  // Blocks until the job is finished; with a timeout, returns whether it is.
  void wait_finished(const JobPtr& j);
  bool wait_finished(const JobPtr& j, std::chrono::milliseconds timeout);
  // Events with id > after; waits up to `timeout` for one to arrive. `finished` tells whether the
  // job's last event is among those already available.
  std::vector<JobEvent> events_after(const JobPtr& j, int64_t after, std::chrono::milliseconds timeout,
                                     bool* finished);

  // A finished job's images (copies; index < 0: all), as often as asked until the history evicts them.
  // Throws ApiException: 404 no such image, 409 not finished / failed / cancelled, 410 evicted or deleted.
  std::vector<std::pair<int, std::string>> images(const JobPtr& j, int index);
  // Every job record, newest first, at most `limit` (GET /v1/jobs).
  std::vector<JobPtr> list(size_t limit) const;
  // An event stream opens (+1) or closes (-1) on the job: previews are made only while one is open.
  void watch(const JobPtr& j, int delta);
  // The history's size: finished jobs with images, and their PNG bytes.
  std::pair<int, size_t> history_size() const;
  const QueueOptions& options() const { return opt_; }

  // Shutdown, in two steps: stop taking work (submit -> 503) and cancel waiting jobs; then let the
  // running batch finish for up to `grace_s` seconds, cancel it if it has not, and join the worker.
  void begin_shutdown();
  void finish(double grace_s);
  bool stopping() const { return stopping_.load(); }

  QueueGauges gauges() const;
  int position(const Job& j) const;  // 0-based place among waiting jobs, -1 when not waiting

 private:
  struct Batch {
    std::vector<JobPtr> jobs;
    std::atomic<bool> cancel{false};
  };

  void worker();
  void run_batch(const std::shared_ptr<Batch>& b);
  void on_progress(const std::shared_ptr<Batch>& b, const Progress& p);
  void push_event(Job& j, const std::string& type, nlohmann::json data);  // with mu_ held
  void finish_job(Job& j, JobState s, std::optional<ApiError> err);    // with mu_ held
  void log_job(const Job& j) const;  // the log line of a finished job (QueueOptions::log_jobs)
  void prune();                                                          // with mu_ held
  std::string new_id();
  nlohmann::json params_json(const Job& j) const;

  std::unique_ptr<Engine> pipeline_;
  QueueOptions opt_;
  Metrics& metrics_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;    // the worker: new work or stop
  std::condition_variable change_cv_;  // watchers: any job changed
  std::deque<JobPtr> waiting_;
  std::map<std::string, JobPtr> jobs_;
  std::shared_ptr<Batch> running_;
  CostModel cost_;
  std::atomic<bool> stopping_{false};
  bool worker_exit_ = false;
  uint64_t id_counter_ = 0;
  uint64_t id_salt_ = 0;
  Clock::time_point last_step_time_{};
  std::thread worker_thread_;
};

}  // namespace ernie::server
