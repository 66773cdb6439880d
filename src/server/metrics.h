// Counters and histograms for GET /metrics, rendered in the Prometheus text format (version 0.0.4).
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace ernie::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  // Appends `name_bucket{le=...}`, `name_sum`, `name_count` lines.
  void render(std::string& out, const std::string& name, const std::string& help) const;
  uint64_t count() const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); last = +Inf
  double sum_ = 0;
  uint64_t n_ = 0;
};

struct QueueGauges {
  int queued = 0, running = 0, stored_results = 0, records = 0;
  size_t stored_result_bytes = 0;
  bool shutting_down = false;
};

class Metrics {
 public:
  Metrics();
  void count_request(int status);
  void count_job(const std::string& final_state);  // "succeeded", "failed", "cancelled"
  std::atomic<uint64_t> images_generated{0}, batches_run{0}, batched_jobs{0}, results_expired{0};
  Histogram step_seconds, job_seconds, queue_wait_seconds, lora_switch_seconds;

  // The whole exposition; gauges are read at call time (process RSS, GPU memory when CUDA is built).
  std::string render(const QueueGauges& g) const;

 private:
  mutable std::mutex mu_;
  std::map<int, uint64_t> requests_;
  std::map<std::string, uint64_t> jobs_;
};

uint64_t process_rss_bytes();  // from /proc/self/statm; 0 when unavailable
uint64_t heap_in_use_bytes();  // live heap bytes (glibc mallinfo2, or AddressSanitizer's count); 0 when unknown

}  // namespace ernie::server
