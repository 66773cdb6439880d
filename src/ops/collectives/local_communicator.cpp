#include "ops/collectives/local_communicator.h"

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace ernie {
namespace {

void copy_bytes(void* dst, const void* src, size_t bytes, Device d) {
  if (bytes == 0) return;
  if (d.is_cpu())
    std::memcpy(dst, src, bytes);
  else
    device_memory_ops().copy(dst, d, src, d, bytes);  // on the device's stream, in order with the ranks' work
}

struct Shared {
  int n = 0;
  Device device;
  std::mutex turn;  // held by the rank that runs
  std::mutex mu;    // the fields below
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  bool aborted = false;
  // Each rank's `in` during an exchange, and what it is by value: a rank that finds a mismatch throws and frees
  // its `in` while the others check, so the checks read only these copies.
  struct Slot {
    const Tensor* t = nullptr;
    size_t bytes = 0;
    DType dtype = DType::F32;
    Shape shape;
  };
  std::vector<Slot> slots;

  // Every rank arrives before any leaves; a waiting rank gives up its turn. Called holding the turn.
  void barrier() {
    std::unique_lock<std::mutex> lk(mu);
    if (aborted) throw Error("parallel: another rank failed");
    const uint64_t g = generation;
    if (++arrived == n) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    turn.unlock();
    cv.wait(lk, [&] { return generation != g || aborted; });
    const bool failed = generation == g;
    lk.unlock();
    turn.lock();
    if (failed) throw Error("parallel: another rank failed");
  }
};

class LocalComm final : public Communicator {
 public:
  LocalComm(Shared& s, int r) : s_(s), r_(r) {}
  int rank() const override { return r_; }
  int size() const override { return s_.n; }
  Device device() const override { return s_.device; }

  void all_gather(const Tensor& in, const Tensor& out) override {
    check_all_gather(*this, in, out);
    publish(in);
    const size_t bytes = in.nbytes();
    for (int j = 0; j < s_.n; ++j)
      copy_bytes(static_cast<char*>(out.raw()) + size_t(j) * bytes, s_.slots[size_t(j)].t->raw(), bytes, s_.device);
    s_.barrier();  // nobody changes its `in` before every rank has read it
  }

  void all_to_all(const Tensor& in, const Tensor& out) override {
    check_all_to_all(*this, in, out);
    publish(in);
    const size_t chunk = in.nbytes() / size_t(s_.n);
    for (int j = 0; j < s_.n; ++j) {
      const Tensor& src = *s_.slots[size_t(j)].t;  // its size checked by publish
      copy_bytes(static_cast<char*>(out.raw()) + size_t(j) * chunk,
                 static_cast<const char*>(src.raw()) + size_t(r_) * chunk, chunk, s_.device);
    }
    s_.barrier();
  }

  void barrier() override { s_.barrier(); }

 private:
  void publish(const Tensor& in) {
    {
      std::lock_guard<std::mutex> lk(s_.mu);
      s_.slots[size_t(r_)] = {&in, in.nbytes(), in.dtype(), in.shape()};
    }
    s_.barrier();
    // Every rank checks every slot (the copies), so all of them throw or none does.
    const Shared::Slot& first = s_.slots[0];
    for (int j = 0; j < s_.n; ++j) {
      const Shared::Slot& x = s_.slots[size_t(j)];
      ERNIE_CHECK(x.bytes == first.bytes && x.dtype == first.dtype, "parallel: rank ", std::to_string(j), " passed ",
                  shape_str(x.shape), " ", dtype_name(x.dtype), ", rank 0 ", shape_str(first.shape), " ",
                  dtype_name(first.dtype));
    }
  }

  Shared& s_;
  int r_;
};

class LocalGroup final : public CommGroup {
 public:
  LocalGroup(int n, Device d) {
    s_.n = n;
    s_.device = d;
    s_.slots.assign(size_t(n), {});
    for (int r = 0; r < n; ++r) comms_.push_back(std::make_unique<LocalComm>(s_, r));
  }
  int size() const override { return s_.n; }
  Communicator& rank(int r) override { return *comms_.at(size_t(r)); }
  const char* kind() const override { return "local"; }
  void enter(int) override { s_.turn.lock(); }
  void leave(int) override { s_.turn.unlock(); }
  void abort() override {
    std::lock_guard<std::mutex> lk(s_.mu);
    s_.aborted = true;
    s_.cv.notify_all();
  }

 private:
  Shared s_;
  std::vector<std::unique_ptr<LocalComm>> comms_;
};

}  // namespace

std::unique_ptr<CommGroup> make_local_group(int ranks, Device device) {
  ERNIE_CHECK(ranks >= 1, "parallel: a local group needs at least one rank, not ", std::to_string(ranks));
  return std::make_unique<LocalGroup>(ranks, device);
}

}  // namespace ernie
