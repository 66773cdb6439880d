// Collectives between the ranks of one parallel run (issue 28): each rank runs the same split code on its own
// thread and device, and exchanges tensors through a Communicator. Two kinds: LocalGroup (N ranks in one process
// on one device, through that device's memory: the split code checked on one GPU or the CPU) and NcclGroup (one
// rank per GPU, through NCCL).
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace ernie {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Device device() const = 0;  // where this rank's tensors live
  // out = [in of rank 0; in of rank 1; ...]: every rank passes an `in` of the same shape and dtype, and an `out`
  // of size() times its bytes, both contiguous on device(). Ordered after the work already queued on the device.
  virtual void all_gather(const Tensor& in, const Tensor& out) = 0;
  // `in` is size() equal chunks along its bytes, chunk j for rank j; out's chunk j is rank j's chunk for this
  // rank. in and out have the same bytes, on device().
  virtual void all_to_all(const Tensor& in, const Tensor& out) = 0;
  // Returns when every rank has called it (and this rank's queued device work is done).
  virtual void barrier() = 0;
};

// The ranks of one group, run together by run_ranks.
class CommGroup {
 public:
  virtual ~CommGroup() = default;
  virtual int size() const = 0;
  virtual Communicator& rank(int r) = 0;
  virtual const char* kind() const = 0;  // "local", "nccl"
  // Called on rank r's thread before and after its work (make its device current; a local group takes turns).
  virtual void enter(int r) = 0;
  virtual void leave(int r) = 0;
  // A rank failed: the others' collectives throw instead of waiting for it.
  virtual void abort() = 0;
};

// Runs fn(rank r's communicator) on one thread per rank (rank 0 on the calling thread) and returns when all have;
// the first error a rank threw (after the group was aborted for the others) is rethrown here.
void run_ranks(CommGroup& group, const std::function<void(Communicator&)>& fn);

// The argument checks of the collectives (shared by every kind), throwing Error naming the collective.
void check_all_gather(const Communicator& c, const Tensor& in, const Tensor& out);
void check_all_to_all(const Communicator& c, const Tensor& in, const Tensor& out);

}  // namespace ernie
