#include "models/block_streamer.h"

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
  std::vector<std::pair<Shape, DType>> layout;  // block 0's tensors
  std::vector<size_t> offset;
  for (int l = 0; l < num_blocks; ++l) {
    const std::vector<Tensor> b = block(l);
    if (l == 0) {
      ERNIE_CHECK(!b.empty(), "offload blocks: block 0 has no tensors");
      for (const Tensor& t : b) {
        layout.push_back({t.shape(), t.dtype()});
        offset.push_back(block_bytes_);
        block_bytes_ = align_up(block_bytes_ + t.nbytes());
      }
    }
    ERNIE_CHECK(b.size() == layout.size(), "offload blocks: block ", std::to_string(l), " has ",
                std::to_string(b.size()), " tensors, block 0 has ", std::to_string(layout.size()));
    Tensor buf = ops::pinned_empty(block_bytes_, device);
    char* dst = buf.data<char>();
    std::memset(dst, 0, block_bytes_);
    for (size_t i = 0; i < b.size(); ++i) {
      const Tensor& t = b[i];
      const auto& [shape, dtype] = layout[i];
      ERNIE_CHECK(t.shape() == shape && t.dtype() == dtype, "offload blocks: tensor ", std::to_string(i),
                  " of block ", std::to_string(l), " is ", shape_str(t.shape()), " ", dtype_name(t.dtype()),
                  ", block 0 has ", shape_str(shape), " ", dtype_name(dtype));
      if (t.device().is_cpu()) std::memcpy(dst + offset[i], t.raw(), t.nbytes());
      else device_memory_ops().copy(dst + offset[i], kCPU, t.raw(), t.device(), t.nbytes());
    }
    host_.push_back(std::move(buf));
  }
  for (int s = 0; s < 2; ++s) {
    slot_buf_[size_t(s)] = Tensor::empty({int64_t(block_bytes_)}, DType::U8, device);
    auto owner = std::make_shared<Tensor>(slot_buf_[size_t(s)]);
    for (size_t i = 0; i < layout.size(); ++i)
      slot_views_[size_t(s)].push_back(Tensor::borrow(slot_buf_[size_t(s)].data<char>() + offset[i], layout[i].first,
                                                      layout[i].second, owner, device));
    ready_[size_t(s)] = std::make_unique<ops::StreamEvent>(device);
    free_[size_t(s)] = std::make_unique<ops::StreamEvent>(device);
  }
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

void BlockStreamer::upload(int l, int s) {
  free_[size_t(s)]->wait(ops::Stream::Copy);
  ops::upload_async(slot_buf_[size_t(s)], host_[size_t(l)]);
  ready_[size_t(s)]->record(ops::Stream::Copy);
  in_slot_[size_t(s)] = l;
}

int BlockStreamer::acquire(int l) {
  ERNIE_CHECK(l >= 0 && l < num_blocks(), "offload blocks: block ", std::to_string(l), " of ",
              std::to_string(num_blocks()));
  if (l == 0)  // a new forward: both slots are free once the compute stream has done what came before
    for (auto& f : free_) f->record(ops::Stream::Compute);
  const int s = l % 2;
  if (in_slot_[size_t(s)] != l) upload(l, s);  // not prefetched (block 0), or the slot holds another block
  ready_[size_t(s)]->wait(ops::Stream::Compute);
  // The next block goes into the other slot; after the last block, block 0 of the next forward (when the
  // count is even, block 0's slot is the other one).
  const int next = l + 1 < num_blocks() ? l + 1 : num_blocks() % 2 == 0 ? 0 : -1;
  if (next >= 0 && in_slot_[size_t(1 - s)] != next) upload(next, 1 - s);
  return s;
}

void BlockStreamer::release(int l) { free_[size_t(l % 2)]->record(ops::Stream::Compute); }

double BlockStreamer::measure_upload_gbps() {
  for (auto& f : free_) f->record(ops::Stream::Compute);
  free_[0]->synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int l = 0; l < num_blocks(); ++l) {
    ops::upload_async(slot_buf_[size_t(l % 2)], host_[size_t(l)]);
    in_slot_[size_t(l % 2)] = l;
  }
  for (int s = 0; s < 2; ++s) ready_[size_t(s)]->record(ops::Stream::Copy);
  ready_[0]->synchronize();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s > 0 ? double(host_bytes()) / s / 1e9 : 0;
}

}  // namespace ernie
