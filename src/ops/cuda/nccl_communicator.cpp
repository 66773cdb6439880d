// The NCCL group (ops/collectives/nccl_communicator.h); a build without NCCL has ops/collectives/nccl_unavailable.cpp.
#ifdef ERNIE_HAVE_NCCL
#include "ops/collectives/nccl_communicator.h"

#include "core/error.h"
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "ops/cuda/common.h"
#include "ops/cuda/cuda_ops.h"

namespace ernie {

namespace {

void nccl_check(ncclResult_t r, const char* call) {
  if (r != ncclSuccess && r != ncclInProgress)
    throw Error(std::string("NCCL error in ") + call + ": " + ncclGetErrorString(r));
}
#define ERNIE_NCCL_CHECK(x) nccl_check((x), #x)

// The ranks' host threads meet; ends with an Error once the group is aborted.
class HostBarrier {
 public:
  explicit HostBarrier(int n) : n_(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lk(mu_);
    if (aborted_) throw Error("parallel: another rank failed");
    const uint64_t g = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lk, [&] { return generation_ != g || aborted_; });
    if (generation_ == g) throw Error("parallel: another rank failed");
  }
  void abort() {
    std::lock_guard<std::mutex> lk(mu_);
    aborted_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_, arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
};

class NcclComm final : public Communicator {
 public:
  NcclComm(ncclComm_t c, int rank, int size, int gpu, HostBarrier& host_barrier, const std::atomic<bool>& aborted)
      : c_(c), rank_(rank), size_(size), gpu_(gpu), host_barrier_(host_barrier), aborted_(aborted) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device{DeviceKind::CUDA, gpu_}; }

  void all_gather(const Tensor& in, const Tensor& out) override {
    check_all_gather(*this, in, out);
    check_live();
    ERNIE_NCCL_CHECK(ncclAllGather(in.raw(), out.raw(), in.nbytes(), ncclUint8, c_, cuda::stream(gpu_)));
  }

  void all_to_all(const Tensor& in, const Tensor& out) override {
    check_all_to_all(*this, in, out);
    check_live();
    const size_t chunk = in.nbytes() / size_t(size_);
    cudaStream_t st = cuda::stream(gpu_);
    ERNIE_NCCL_CHECK(ncclGroupStart());
    for (int j = 0; j < size_; ++j) {
      ERNIE_NCCL_CHECK(ncclSend(static_cast<const char*>(in.raw()) + size_t(j) * chunk, chunk, ncclUint8, j, c_, st));
      ERNIE_NCCL_CHECK(ncclRecv(static_cast<char*>(out.raw()) + size_t(j) * chunk, chunk, ncclUint8, j, c_, st));
    }
    ERNIE_NCCL_CHECK(ncclGroupEnd());
  }

  void barrier() override {
    cuda::synchronize(gpu_);
    host_barrier_.arrive_and_wait();
  }

 private:
  void check_live() const {
    if (aborted_) throw Error("parallel: another rank failed");
  }
  ncclComm_t c_;
  int rank_, size_, gpu_;
  HostBarrier& host_barrier_;
  const std::atomic<bool>& aborted_;
};

class NcclGroup final : public CommGroup {
 public:
  explicit NcclGroup(const std::vector<int>& gpus) : gpus_(gpus), host_barrier_(int(gpus.size())) {
    raw_.resize(gpus.size());
    ERNIE_NCCL_CHECK(ncclCommInitAll(raw_.data(), int(gpus.size()), gpus.data()));
    for (size_t r = 0; r < gpus.size(); ++r)
      comms_.push_back(std::make_unique<NcclComm>(raw_[r], int(r), int(gpus.size()), gpus[r], host_barrier_,
                                                   aborted_));
  }
  ~NcclGroup() override {
    for (ncclComm_t c : raw_)
      if (c) aborted_ ? ncclCommAbort(c) : ncclCommDestroy(c);
  }
  int size() const override { return int(gpus_.size()); }
  Communicator& rank(int r) override { return *comms_.at(size_t(r)); }
  const char* kind() const override { return "nccl"; }
  void enter(int r) override { cuda::stream(gpus_[size_t(r)]); }  // makes the rank's device current
  void leave(int r) override {
    if (!aborted_) cuda::synchronize(gpus_[size_t(r)]);
  }
  // A failed rank never joins the others' collectives: abort the communicators so their waits end with an error.
  void abort() override {
    if (aborted_.exchange(true)) return;
    host_barrier_.abort();
    for (ncclComm_t c : raw_) ncclCommAbort(c);
    raw_.assign(raw_.size(), nullptr);
  }

 private:
  std::vector<int> gpus_;
  std::vector<ncclComm_t> raw_;
  std::vector<std::unique_ptr<NcclComm>> comms_;
  HostBarrier host_barrier_;
  std::atomic<bool> aborted_{false};
};

}  // namespace

bool nccl_built() { return true; }

std::string linked_nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "";
  // NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch since 2.9
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

std::unique_ptr<CommGroup> make_nccl_group(const std::vector<int>& gpus) {
  ERNIE_CHECK(gpus.size() >= 2, "--gpus: NCCL needs at least two GPUs, got ", std::to_string(gpus.size()));
  return std::make_unique<NcclGroup>(gpus);
}

}  // namespace ernie
#endif
