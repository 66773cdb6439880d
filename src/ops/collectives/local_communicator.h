// N ranks in one process on one device (the CPU, or one GPU): the split code of the parallel modes, run and
// checked without several GPUs. Collectives copy through the device's memory (host memcpy, or device copies on
// the GPU's one stream). The ranks take turns: one rank runs at a time, and hands over in its collectives, so
// they share the backend (one CUDA stream, the CPU's thread pool) exactly as a single run does.
#pragma once
#include <memory>

#include "ops/collectives/communicator.h"

namespace ernie {

std::unique_ptr<CommGroup> make_local_group(int ranks, Device device);

}  // namespace ernie
