// One rank per GPU through NCCL (built when CMake finds nccl.h and libnccl; ERNIE_HAVE_NCCL). The ranks are
// threads of this process, created together with ncclCommInitAll; each rank's collectives run on its device's
// one stream (ops/cuda), in order with its compute.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "ops/collectives/communicator.h"

namespace ernie {

bool nccl_built();
// NCCL's version as "2.27.3" (ncclGetVersion), or "" in a build without NCCL.
std::string linked_nccl_version();
// A group over the CUDA devices `gpus` (distinct indices), rank r on gpus[r]; throws Error without NCCL.
std::unique_ptr<CommGroup> make_nccl_group(const std::vector<int>& gpus);

}  // namespace ernie
