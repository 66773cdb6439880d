// A shared-queue worker's job (issue 27), run on the engine: the request as request_json.h stores it is parsed
// and resolved here, generated with the progress of each denoising step sent to the job's events (a cancel
// seen there stops the engine between steps), and the images come back as PNGs with their metadata, described
// by a JSON object (revised prompt, seeds, size, timings) that the api nodes show.
//
// How a run ends (server/redis_queue.h RedisWorker): a request that does not parse or resolve fails at once
// (another attempt would fail the same way); out of device memory is retryable; any other engine error fails
// the job. When `abandon` turns true (the worker is shutting down and its grace period is over) the engine
// stops at its next step and the job goes back to the queue (retryable) for another worker.
#pragma once
#include <atomic>
#include <string>

#include "engine/engine.h"
#include "server/redis_queue.h"
#include "server/request_parse.h"

namespace ernie::server {

struct EngineRunnerOptions {
  std::string model_name;                  // for the PNG metadata
  ParseLimits limits;
  const std::atomic<bool>* abandon = nullptr;
  bool log_jobs = false;                   // one line per job on stderr
};

// The runner keeps a reference to `engine`, which must outlive it.
RedisWorker::Runner engine_runner(Engine& engine, EngineRunnerOptions opt);

}  // namespace ernie::server
