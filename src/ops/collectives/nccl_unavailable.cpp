// The NCCL group's entry points in a build without NCCL (ERNIE_HAVE_NCCL unset); with it, ops/cuda/nccl_communicator.cpp.
#ifndef ERNIE_HAVE_NCCL
#include "core/error.h"
#include "ops/collectives/nccl_communicator.h"

namespace ernie {

bool nccl_built() { return false; }
std::string linked_nccl_version() { return ""; }
std::unique_ptr<CommGroup> make_nccl_group(const std::vector<int>&) {
  throw Error("--gpus: this build has no NCCL (rebuild with CUDA and NCCL's nccl.h and libnccl found by CMake)");
}

}  // namespace ernie
#endif
