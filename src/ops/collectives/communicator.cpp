#include "ops/collectives/communicator.h"

#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"

namespace ernie {

void run_ranks(CommGroup& group, const std::function<void(Communicator&)>& fn) {
  const int n = group.size();
  std::mutex mu;
  std::exception_ptr first;
  auto body = [&](int r) {
    bool entered = false;
    try {
      group.enter(r);
      entered = true;
      fn(group.rank(r));
    } catch (...) {
      {
        std::lock_guard<std::mutex> lk(mu);
        if (!first) first = std::current_exception();
      }
      group.abort();
    }
    if (entered) group.leave(r);
  };
  std::vector<std::thread> threads;
  threads.reserve(size_t(n));
  for (int r = 1; r < n; ++r) threads.emplace_back(body, r);
  body(0);  // rank 0 on the calling thread: its callbacks (progress) run where a single-device run's do
  for (std::thread& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

namespace {
void check_pair(const Communicator& c, const char* what, const Tensor& in, const Tensor& out) {
  ERNIE_CHECK(in.defined() && out.defined(), what, ": undefined tensor");
  ERNIE_CHECK(in.device() == c.device() && out.device() == c.device(), what, ": tensors on ", in.device().str(),
              " and ", out.device().str(), ", rank ", std::to_string(c.rank()), " is on ", c.device().str());
  ERNIE_CHECK(in.dtype() == out.dtype(), what, ": in is ", dtype_name(in.dtype()), ", out ", dtype_name(out.dtype()));
}
}  // namespace

void check_all_gather(const Communicator& c, const Tensor& in, const Tensor& out) {
  check_pair(c, "all_gather", in, out);
  ERNIE_CHECK(out.numel() == in.numel() * c.size(), "all_gather: out ", shape_str(out.shape()), " is not ",
              std::to_string(c.size()), " times in ", shape_str(in.shape()));
}

void check_all_to_all(const Communicator& c, const Tensor& in, const Tensor& out) {
  check_pair(c, "all_to_all", in, out);
  ERNIE_CHECK(out.numel() == in.numel() && in.numel() % c.size() == 0, "all_to_all: in ", shape_str(in.shape()),
              " and out ", shape_str(out.shape()), " must have the same size, a multiple of ", std::to_string(c.size()),
              " ranks");
}

}  // namespace ernie
