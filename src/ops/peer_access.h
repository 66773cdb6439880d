// Whether CUDA lets `from` access `to`'s memory directly (cudaDeviceCanAccessPeer): 1 or 0, -1 when it cannot say
// (no CUDA backend, no such device). doctor's topology section (core/gpu_topology.h).
#pragma once

namespace ernie::ops {

int peer_access(int from, int to);

}  // namespace ernie::ops
