// --parallel data (issue 28): one whole engine per GPU (or per local rank on one device), each with its own copy of
// every component. A batch of requests (Engine::generate_batch, what serve's batching hands over) is split into one
// contiguous group per engine, balanced by images; the groups run at the same time and the results come back in
// request order, each as one engine alone gives it. Single requests go to the engines in turn.
#pragma once
#include <memory>

#include "engine/engine.h"
#include "engine/parallel/parallel_plan.h"

namespace ernie {

// Opens one engine per rank of `plan` (mode Data): on plan.gpus, or plan.local_ranks engines on o.device.
std::unique_ptr<Engine> open_data_parallel(const EngineOptions& o, const ParallelPlan& plan, const ProgressFn& progress);

// The groups a batch splits into: contiguous runs of requests, at most `groups` of them, each of at most `per_group`
// images where possible, balanced by images (a request's num_images stays together). Returns each group's first
// request index (ascending, starting at 0).
std::vector<size_t> split_batch(const std::vector<int>& images, int groups, int per_group);
// A group's requests [begin, end) as the batches one engine runs one after another: contiguous, each of at most
// `per_group` images (a request larger than that alone). Returns each batch's first request index. A group can
// exceed one engine's batch ([15, 2, 15] over 2 engines of 16), so the engine runs it in these pieces.
std::vector<size_t> engine_batches(const std::vector<int>& images, size_t begin, size_t end, int per_group);

}  // namespace ernie
