#include "server/metrics.h"

#include <cstdio>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define ERNIE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ERNIE_ASAN 1
#endif
#endif
#if defined(ERNIE_ASAN)
extern "C" size_t __sanitizer_get_current_allocated_bytes();  // sanitizer/allocator_interface.h
#elif defined(__GLIBC__)
#include <malloc.h>
#endif

#include "core/system_info.h"

namespace ernie::server {
namespace {
std::string num(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}
void line(std::string& out, const std::string& name, double v) { out += name + " " + num(v) + "\n"; }
void head(std::string& out, const std::string& name, const char* type, const std::string& help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}
}  // namespace

Histogram::Histogram(std::vector<double> b) : bounds_(std::move(b)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  std::lock_guard<std::mutex> l(mu_);
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++n_;
}

uint64_t Histogram::count() const {
  std::lock_guard<std::mutex> l(mu_);
  return n_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  std::lock_guard<std::mutex> l(mu_);
  head(out, name, "histogram", help);
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += name + "_bucket{le=\"" + num(bounds_[i]) + "\"} " + std::to_string(cum) + "\n";
  }
  cum += counts_.back();
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cum) + "\n";
  line(out, name + "_sum", sum_);
  out += name + "_count " + std::to_string(n_) + "\n";
}

Metrics::Metrics()
    : step_seconds({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}),
      job_seconds({0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250}),
      queue_wait_seconds({0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300}),
      lora_switch_seconds({0.01, 0.05, 0.1, 0.25, 0.5, 1, 1.5, 2.5, 5, 10, 30}) {}

void Metrics::count_request(int status) {
  std::lock_guard<std::mutex> l(mu_);
  ++requests_[status];
}

void Metrics::count_job(const std::string& s) {
  std::lock_guard<std::mutex> l(mu_);
  ++jobs_[s];
}

uint64_t heap_in_use_bytes() {
#if defined(ERNIE_ASAN)
  return __sanitizer_get_current_allocated_bytes();
#elif defined(__GLIBC__)
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
#else
  return 0;
#endif
}

uint64_t process_rss_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long size = 0, rss = 0;
  int n = std::fscanf(f, "%llu %llu", &size, &rss);
  std::fclose(f);
  return n == 2 ? rss * uint64_t(sysconf(_SC_PAGESIZE)) : 0;
}

std::string Metrics::render(const QueueGauges& g) const {
  std::string out;
  head(out, "ernie_queue_length", "gauge", "Jobs waiting to run.");
  line(out, "ernie_queue_length", g.queued);
  head(out, "ernie_jobs_running", "gauge", "Jobs being generated now.");
  line(out, "ernie_jobs_running", g.running);
  head(out, "ernie_results_stored", "gauge", "Finished jobs in the history (their images can be fetched).");
  line(out, "ernie_results_stored", g.stored_results);
  head(out, "ernie_results_stored_bytes", "gauge", "Bytes of PNG held in the history.");
  line(out, "ernie_results_stored_bytes", double(g.stored_result_bytes));
  head(out, "ernie_job_records", "gauge", "Job records kept for status queries.");
  line(out, "ernie_job_records", g.records);
  head(out, "ernie_shutting_down", "gauge", "1 while the server drains before exit.");
  line(out, "ernie_shutting_down", g.shutting_down ? 1 : 0);
  head(out, "ernie_images_generated_total", "counter", "Images generated.");
  line(out, "ernie_images_generated_total", double(images_generated.load()));
  head(out, "ernie_batches_total", "counter", "Engine calls that ran more than one request together.");
  line(out, "ernie_batches_total", double(batches_run.load()));
  head(out, "ernie_batched_jobs_total", "counter", "Jobs that ran inside such a batch.");
  line(out, "ernie_batched_jobs_total", double(batched_jobs.load()));
  head(out, "ernie_results_expired_total", "counter", "Finished jobs whose images were evicted from the history (--history, --history-mib).");
  line(out, "ernie_results_expired_total", double(results_expired.load()));
  {
    std::lock_guard<std::mutex> l(mu_);
    head(out, "ernie_jobs_total", "counter", "Finished jobs by final state.");
    for (auto& [s, n] : jobs_) out += "ernie_jobs_total{state=\"" + s + "\"} " + std::to_string(n) + "\n";
    head(out, "ernie_http_requests_total", "counter", "HTTP responses by status code.");
    for (auto& [c, n] : requests_) out += "ernie_http_requests_total{code=\"" + std::to_string(c) + "\"} " + std::to_string(n) + "\n";
  }
  step_seconds.render(out, "ernie_step_seconds", "Wall time of one denoising step (one batch).");
  job_seconds.render(out, "ernie_job_seconds", "Wall time of one pipeline call, encode to decode.");
  queue_wait_seconds.render(out, "ernie_queue_wait_seconds", "Time a job waited before it started.");
  lora_switch_seconds.render(out, "ernie_lora_switch_seconds", "Time to reload the DiT for another LoRA set.");
  head(out, "ernie_process_resident_memory_bytes", "gauge", "Resident set size of the server process.");
  line(out, "ernie_process_resident_memory_bytes", double(process_rss_bytes()));
  head(out, "ernie_heap_in_use_bytes", "gauge", "Heap bytes allocated and not freed (the allocator's count).");
  line(out, "ernie_heap_in_use_bytes", double(heap_in_use_bytes()));
  SystemInfo si = query_system_info();  // no GPUs without the CUDA backend
  if (!si.gpus.empty()) {
    head(out, "ernie_gpu_memory_used_bytes", "gauge", "Device memory in use (all processes), per GPU.");
    for (auto& gpu : si.gpus)
      out += "ernie_gpu_memory_used_bytes{gpu=\"" + std::to_string(gpu.index) + "\"} " +
             num(double(gpu.total_bytes - gpu.free_bytes)) + "\n";
    head(out, "ernie_gpu_memory_total_bytes", "gauge", "Device memory, per GPU.");
    for (auto& gpu : si.gpus)
      out += "ernie_gpu_memory_total_bytes{gpu=\"" + std::to_string(gpu.index) + "\"} " + num(double(gpu.total_bytes)) + "\n";
  }
  return out;
}

}  // namespace ernie::server
