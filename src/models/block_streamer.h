// --offload blocks: a model's repeated blocks live in page-locked host memory and are streamed to the GPU
// one block ahead of the compute, into two device slots (double buffering). While the compute stream runs
// block l from one slot, the copy stream fills the other with block l+1; events make each stream wait only
// for what it needs (compute for the upload of its block, the upload for the compute leaving the slot).
// Blocks may differ in layout (an 8-bit DiT keeps its first and last blocks in bf16): block l always goes
// into slot l % 2, and each slot is as large as the largest block.
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
  // device tensors, in their final dtype), copied into one pinned host buffer per block, one block at a
  // time. Needs a CUDA device.
  BlockStreamer(int num_blocks, Device device, const std::function<std::vector<Tensor>(int)>& block);
  ~BlockStreamer();
  BlockStreamer(const BlockStreamer&) = delete;
  BlockStreamer& operator=(const BlockStreamer&) = delete;

  int num_blocks() const { return int(host_.size()); }
  // The device tensors of block l: views into its slot (l % 2), in the order block(l) gave them. They hold
  // block l's weights between acquire(l) and release(l), in stream order.
  const std::vector<Tensor>& views(int l) const { return views_[size_t(l)]; }
  // Call before enqueuing block l's compute: makes the compute stream wait for block l's upload into its
  // slot, and starts the upload of block l+1 (after the last block: block 0, for the next forward) into
  // the other slot. Blocks are acquired in order 0..n-1 in every forward.
  void acquire(int l);
  // Call after enqueuing block l's compute: its slot may be refilled once the compute stream gets there.
  void release(int l);

  size_t block_bytes() const { return block_bytes_; }  // the largest block, as uploaded: one slot
  size_t host_bytes() const;                           // every block
  size_t device_bytes() const { return 2 * block_bytes_; }
  // Uploads every block once (alternating slots, nothing else running) and returns the rate in GB/s (1e9 B/s).
  double measure_upload_gbps();

 private:
  void copy(int l);    // block l into its slot, on the copy stream
  void upload(int l);  // the same, once the slot is free, then marks it ready

  Device device_;
  size_t block_bytes_ = 0;
  std::vector<Tensor> host_;                     // per block: pinned, that block's bytes (U8)
  std::array<Tensor, 2> slot_buf_;               // device [block_bytes] U8
  std::vector<std::vector<Tensor>> views_;       // per block: its tensors in its slot
  std::array<std::unique_ptr<ops::StreamEvent>, 2> ready_, free_;  // upload into slot done / slot free again
  std::array<int, 2> in_slot_ = {-1, -1};        // which block each slot holds (or is receiving)
};

}  // namespace ernie
