// When to run waiting requests together. Requests are compatible when they share size, steps, guidance,
// use_pe, sampler, shift, LoRAs and img2img's strength, image and mask (one pass of the denoiser can take them as one batch). A batch is formed only when the
// measured time of the larger batch is no longer than the head request's time alone (within `tolerance`
// for timing noise), so nobody waits longer than without batching: the head finishes no later, the other
// members finish earlier, and requests they jump over start no later. A batch size never measured is
// tried once (the trial is then measured); a size that was slower is not tried again.
#pragma once
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace ernie::server {

struct BatchKey {
  int width = 0, height = 0, steps = 0;
  float cfg = 0;
  bool use_pe = false;
  int sampler = 0;  // SamplerKind
  float shift = 0;
  std::vector<std::pair<std::string, float>> loras;  // resolved paths and scales, in order
  float strength = -1;           // img2img: the strength (its first step); -1 text-to-image
  bool image = false, mask = false;  // an init image, a mask
  auto tie() const { return std::tie(width, height, steps, cfg, use_pe, sampler, shift, loras, strength, image, mask); }
  bool operator==(const BatchKey& o) const { return tie() == o.tie(); }
  bool operator<(const BatchKey& o) const { return tie() < o.tie(); }
};

struct Waiting {
  BatchKey key;
  int images = 1;  // the request's n
};

// Wall time of a generate call by (key, total images), an exponential moving average.
class CostModel {
 public:
  void record(const BatchKey& k, int images, double seconds);
  std::optional<double> estimate(const BatchKey& k, int images) const;
  size_t entries() const { return t_.size(); }

 private:
  std::map<std::pair<BatchKey, int>, double> t_;
};

struct BatchPolicy {
  int max_images = 1;       // the pipeline's largest batch (1: it cannot batch)
  double tolerance = 0.05;  // timing noise accepted when comparing a batch with the head alone
};

// Indices into `queue` (FIFO order, index 0 = head) to run now as one batch; always starts with 0.
std::vector<size_t> choose_batch(const std::vector<Waiting>& queue, const CostModel& cost, const BatchPolicy& p);

}  // namespace ernie::server
