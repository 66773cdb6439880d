#include "models/block_streamer.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/error.h"

namespace ernie {

namespace {
constexpr size_t kAlign = 256;  // every tensor in a block buffer starts 256-byte aligned
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

BlockStreamer::BlockStreamer(int num_blocks, Device device, const std::function<std::vector<Tensor>(int)>& block)
    : device_(device) {
  ERNIE_CHECK(device.is_cuda(), "offload blocks: streaming needs a CUDA device, not ", device.str());
  ERNIE_CHECK(num_blocks > 0, "offload blocks: no blocks to stream");
  struct Placed {
    Shape shape;
    DType dtype;
    size_t offset;
  };
  std::vector<std::vector<Placed>> layouts;
  for (int l = 0; l < num_blocks; ++l) {
    const std::vector<Tensor> b = block(l);
    ERNIE_CHECK(!b.empty(), "offload blocks: block ", std::to_string(l), " has no tensors");
    std::vector<Placed> layout;
    size_t bytes = 0;
    for (const Tensor& t : b) {
      layout.push_back({t.shape(), t.dtype(), bytes});
      bytes = align_up(bytes + t.nbytes());
    }
    Tensor buf = ops::pinned_empty(bytes, device);
    char* dst = buf.data<char>();
    std::memset(dst, 0, bytes);
    for (size_t i = 0; i < b.size(); ++i) {
      const Tensor& t = b[i];
      if (t.device().is_cpu()) std::memcpy(dst + layout[i].offset, t.raw(), t.nbytes());
      else device_memory_ops().copy(dst + layout[i].offset, kCPU, t.raw(), t.device(), t.nbytes());
    }
    host_.push_back(std::move(buf));
    layouts.push_back(std::move(layout));
    block_bytes_ = std::max(block_bytes_, bytes);
  }
  for (int s = 0; s < 2; ++s) {
    slot_buf_[size_t(s)] = Tensor::empty({int64_t(block_bytes_)}, DType::U8, device);
    ready_[size_t(s)] = std::make_unique<ops::StreamEvent>(device);
    free_[size_t(s)] = std::make_unique<ops::StreamEvent>(device);
  }
  for (int l = 0; l < num_blocks; ++l) {
    const Tensor& slot = slot_buf_[size_t(l % 2)];
    auto owner = std::make_shared<Tensor>(slot);
    std::vector<Tensor> views;
    for (const Placed& p : layouts[size_t(l)])
      views.push_back(Tensor::borrow(slot.data<char>() + p.offset, p.shape, p.dtype, owner, device));
    views_.push_back(std::move(views));
  }
}

size_t BlockStreamer::host_bytes() const {
  size_t n = 0;
  for (const Tensor& h : host_) n += h.nbytes();
  return n;
}

BlockStreamer::~BlockStreamer() {
  // Pending uploads read the pinned buffers and write the slots: let them finish before both go.
  for (auto& e : ready_) {
    try {
      if (e) e->synchronize();
    } catch (const std::exception&) {
    }
  }
}

void BlockStreamer::copy(int l) {
  const Tensor& host = host_[size_t(l)];
  ops::upload_async(slot_buf_[size_t(l % 2)].narrow(0, host.numel()), host);
  in_slot_[size_t(l % 2)] = l;
}

void BlockStreamer::upload(int l) {
  free_[size_t(l % 2)]->wait(ops::Stream::Copy);
  copy(l);
  ready_[size_t(l % 2)]->record(ops::Stream::Copy);
}

void BlockStreamer::acquire(int l) {
  ERNIE_CHECK(l >= 0 && l < num_blocks(), "offload blocks: block ", std::to_string(l), " of ",
              std::to_string(num_blocks()));
  if (l == 0)  // a new forward: both slots are free once the compute stream has done what came before
    for (auto& f : free_) f->record(ops::Stream::Compute);
  const int s = l % 2;
  if (in_slot_[size_t(s)] != l) upload(l);  // not prefetched (block 0), or the slot holds another block
  ready_[size_t(s)]->wait(ops::Stream::Compute);
  // The next block goes into the other slot; after the last block, block 0 of the next forward (when the
  // count is even, block 0's slot is the other one).
  const int next = l + 1 < num_blocks() ? l + 1 : num_blocks() % 2 == 0 ? 0 : -1;
  if (next >= 0 && in_slot_[size_t(1 - s)] != next) upload(next);
}

void BlockStreamer::release(int l) { free_[size_t(l % 2)]->record(ops::Stream::Compute); }

double BlockStreamer::measure_upload_gbps() {
  for (auto& f : free_) f->record(ops::Stream::Compute);
  free_[0]->synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int l = 0; l < num_blocks(); ++l) copy(l);
  for (int s = 0; s < 2; ++s) ready_[size_t(s)]->record(ops::Stream::Copy);
  ready_[0]->synchronize();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s > 0 ? double(host_bytes()) / s / 1e9 : 0;
}

}  // namespace ernie
