#include "engine/parallel/parallel_plan.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace ernie {

const char* parallel_mode_name(ParallelMode m) {
  switch (m) {
    case ParallelMode::None: return "none";
    case ParallelMode::Cfg: return "cfg";
    case ParallelMode::Ulysses: return "ulysses";
    case ParallelMode::Data: return "data";
    case ParallelMode::Auto: return "auto";
  }
  return "?";
}

ParallelMode parse_parallel_mode(const std::string& s) {
  for (ParallelMode m : {ParallelMode::None, ParallelMode::Cfg, ParallelMode::Ulysses, ParallelMode::Data,
                         ParallelMode::Auto})
    if (s == parallel_mode_name(m)) return m;
  if (s.empty()) return ParallelMode::None;
  fail("--parallel ", s, ": expected none, cfg, ulysses, data or auto");
}

std::vector<int> parse_gpu_list(const std::string& s) {
  std::vector<int> ids;
  if (s.empty()) return ids;
  size_t start = 0;
  while (true) {
    const size_t comma = s.find(',', start);
    const std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    ERNIE_CHECK(!item.empty() && item.size() <= 3 &&
                    std::all_of(item.begin(), item.end(), [](unsigned char c) { return std::isdigit(c); }),
                "--gpus ", s, ": '", item, "' is not a GPU index (a list like 0,1)");
    const int id = std::stoi(item);
    ERNIE_CHECK(std::find(ids.begin(), ids.end(), id) == ids.end(), "--gpus ", s, ": GPU ", item,
                " is named twice (each GPU holds one rank)");
    ids.push_back(id);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return ids;
}

ParallelPlan plan_parallel(const std::string& gpus_text, const std::string& parallel, int local_ranks,
                           const std::string& device_flag, int cuda_devices, bool nccl, Device& device) {
  ParallelPlan p;
  ParallelMode mode = parse_parallel_mode(parallel);
  const std::vector<int> gpus = parse_gpu_list(gpus_text);
  ERNIE_CHECK(local_ranks >= 0, "--parallel-local ", std::to_string(local_ranks), " must not be negative");
  for (int id : gpus)
    ERNIE_CHECK(id < cuda_devices, "--gpus ", gpus_text, ": cuda:", std::to_string(id), " does not exist (",
                std::to_string(cuda_devices), " CUDA device(s) visible)");
  if (!gpus.empty()) {  // the first GPU is the engine's device; --device may only agree
    const Device first{DeviceKind::CUDA, gpus[0]};
    ERNIE_CHECK(device_flag == "auto" || device_flag == "cuda" || Device::parse(device_flag) == first, "--gpus ",
                gpus_text, " and --device ", device_flag, " disagree (leave --device at auto with --gpus)");
    device = first;
  }
  if (mode == ParallelMode::Auto) mode = gpus.size() >= 2 || local_ranks >= 2 ? ParallelMode::Cfg : ParallelMode::None;
  if (mode == ParallelMode::None) {
    ERNIE_CHECK(gpus.size() <= 1, "--gpus ", gpus_text, ": more than one GPU needs a --parallel mode (cfg)");
    ERNIE_CHECK(local_ranks == 0, "--parallel-local needs a --parallel mode (cfg)");
    return p;
  }
  p.mode = mode;  // Cfg, Ulysses or Data
  const bool cfg = mode == ParallelMode::Cfg;
  if (local_ranks > 0) {
    ERNIE_CHECK(!cfg || local_ranks == 2, "--parallel-local ", std::to_string(local_ranks),
                ": --parallel cfg splits two rows (unconditional, conditional) over 2 ranks");
    ERNIE_CHECK(local_ranks >= 2, "--parallel-local ", std::to_string(local_ranks), ": a split needs 2 or more ranks");
    ERNIE_CHECK(gpus.size() <= 1, "--parallel-local runs its ranks on one device; --gpus ", gpus_text, " names ",
                std::to_string(gpus.size()));
    p.local_ranks = local_ranks;
    return p;
  }
  if (cfg)
    ERNIE_CHECK(gpus.size() == 2, "--parallel cfg runs the unconditional and the conditional rows on two GPUs: "
                "--gpus needs exactly 2 ids (e.g. 0,1), got ", gpus.empty() ? std::string("none") : gpus_text);
  else
    ERNIE_CHECK(gpus.size() >= 2, "--parallel ", parallel_mode_name(mode), " splits the work over several GPUs: --gpus "
                "needs 2 or more ids (e.g. 0,1), got ", gpus.empty() ? std::string("none") : gpus_text);
  if (mode == ParallelMode::Data) {  // independent engines: no communicator
    p.gpus = gpus;
    return p;
  }
  ERNIE_CHECK(nccl, "--gpus ", gpus_text, ": this build has no NCCL (rebuild with CUDA and NCCL found by CMake)");
  p.gpus = gpus;
  return p;
}

}  // namespace ernie
