// --offload blocks: a model's repeated blocks live in page-locked host memory and are streamed to the GPU
// one block ahead of the compute, into two device slots (double buffering). While the compute stream runs
// block l from one slot, the copy stream fills the other with block l+1; events make each stream wait only
// for what it needs (compute for the upload of its block, the upload for the compute leaving the slot).
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <vector>

#include "ops/ops.h"

namespace ernie {

class BlockStreamer {
 public:
  // block(l), l = 0..num_blocks-1: the weights of block l as they would be placed on the device (host or
  // device tensors, in their final dtype; every block the same shapes and dtypes), copied into one pinned
  // host buffer per block, one block at a time. Needs a CUDA device.
  BlockStreamer(int num_blocks, Device device, const std::function<std::vector<Tensor>(int)>& block);
  ~BlockStreamer();
  BlockStreamer(const BlockStreamer&) = delete;
  BlockStreamer& operator=(const BlockStreamer&) = delete;

  int num_blocks() const { return int(host_.size()); }
  // The device tensors of slot s (0 or 1), views into the slot buffer, in the order of the blocks' tensors.
  const std::vector<Tensor>& slot(int s) const { return slot_views_[size_t(s)]; }
  // Call before enqueuing block l's compute: returns the slot (l % 2) that holds block l for the compute
  // stream, and starts the upload of block l+1 (after the last block: block 0, for the next forward) into
  // the other slot. Blocks are acquired in order 0..n-1 in every forward.
  int acquire(int l);
  // Call after enqueuing block l's compute: its slot may be refilled once the compute stream gets there.
  void release(int l);

  size_t block_bytes() const { return block_bytes_; }           // one block, as uploaded
  size_t host_bytes() const { return block_bytes_ * host_.size(); }
  size_t device_bytes() const { return 2 * block_bytes_; }
  // Uploads every block once (alternating slots, nothing else running) and returns the rate in GB/s (1e9 B/s).
  double measure_upload_gbps();

 private:
  void upload(int l, int s);  // block l into slot s, on the copy stream, after the slot is free

  Device device_;
  size_t block_bytes_ = 0;
  std::vector<Tensor> host_;                     // per block: pinned [block_bytes] U8
  std::array<Tensor, 2> slot_buf_;               // device [block_bytes] U8
  std::array<std::vector<Tensor>, 2> slot_views_;
  std::array<std::unique_ptr<ops::StreamEvent>, 2> ready_, free_;  // upload into slot done / slot free again
  std::array<int, 2> in_slot_ = {-1, -1};        // which block each slot holds (or is receiving)
};

}  // namespace ernie
