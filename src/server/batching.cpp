#include "server/batching.h"

namespace ernie::server {

void CostModel::record(const BatchKey& k, int images, double seconds) {
  auto [it, fresh] = t_.try_emplace({k, images}, seconds);
  if (!fresh) it->second = 0.7 * it->second + 0.3 * seconds;
}

std::optional<double> CostModel::estimate(const BatchKey& k, int images) const {
  auto it = t_.find({k, images});
  if (it == t_.end()) return std::nullopt;
  return it->second;
}

std::vector<size_t> choose_batch(const std::vector<Waiting>& queue, const CostModel& cost, const BatchPolicy& p) {
  std::vector<size_t> batch;
  if (queue.empty()) return batch;
  batch.push_back(0);
  const Waiting& head = queue[0];
  std::optional<double> alone = cost.estimate(head.key, head.images);
  if (p.max_images <= 1 || !alone) return batch;  // cannot batch, or nothing to compare with yet
  const double limit = *alone * (1.0 + p.tolerance);
  int images = head.images;
  for (size_t i = 1; i < queue.size(); ++i) {
    if (!(queue[i].key == head.key)) continue;
    int more = images + queue[i].images;
    if (more > p.max_images) break;
    std::optional<double> t = cost.estimate(head.key, more);
    if (!t) {
      // Never measured: try it once, one request larger than what is known to pay off.
      batch.push_back(i);
      break;
    }
    if (*t > limit) break;  // larger batches of this shape are slower than the head alone
    batch.push_back(i);
    images = more;
  }
  return batch;
}

}  // namespace ernie::server
