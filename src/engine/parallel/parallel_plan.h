// --gpus and --parallel (issue 28) as the engine runs them: which mode, on which devices, through which
// communicator. Pure rules (the device count and NCCL's presence are arguments), checked before any weights load.
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ernie {

// none: one device. cfg: the unconditional and the conditional rows on two ranks, which exchange each step's
// velocity (a request at cfg <= 1 has one row and runs on rank 0 alone). ulysses: every row on every rank, each
// DiT forward split over the ranks' tokens (2 or more ranks; the heads must split evenly). data: one whole engine
// per rank, a batch of requests split over them (engine/parallel/data_parallel_engine.h).
// auto: cfg with two GPUs, else none.
enum class ParallelMode { None, Cfg, Ulysses, Data, Auto };
const char* parallel_mode_name(ParallelMode m);          // "none", "cfg", ...
ParallelMode parse_parallel_mode(const std::string& s);  // ""/none/cfg/ulysses/data/auto; throws naming --parallel

// "0,1" -> {0, 1}; "" -> {}. Throws naming --gpus on a bad item, a negative or a repeated id.
std::vector<int> parse_gpu_list(const std::string& s);

struct ParallelPlan {
  ParallelMode mode = ParallelMode::None;  // None, Cfg, Ulysses or Data once planned (Auto resolved)
  std::vector<int> gpus;  // rank r's CUDA device (NCCL); empty with local ranks or one device
  int local_ranks = 0;    // > 0: that many ranks in this process on the engine's one device (LocalCommunicator)
  int ranks() const { return local_ranks > 0 ? local_ranks : int(gpus.size()); }
  bool split() const { return mode != ParallelMode::None && ranks() > 1; }
};

// The plan for `gpus` (the --gpus text), `parallel` (--parallel), `local_ranks` (--parallel-local), the device
// --device named (`device_flag`, "auto" allowed), `cuda_devices` visible and whether NCCL is built. Returns the
// plan and sets `device` to the device the engine's single-device parts (text encoder, VAE, rank 0) run on.
ParallelPlan plan_parallel(const std::string& gpus, const std::string& parallel, int local_ranks,
                           const std::string& device_flag, int cuda_devices, bool nccl, Device& device);

}  // namespace ernie
