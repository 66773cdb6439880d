#include "engine/parallel/data_parallel_engine.h"

#include <atomic>
#include <exception>
#include <thread>

#include "core/error.h"

namespace ernie {

std::vector<size_t> split_batch(const std::vector<int>& images, int groups, int per_group) {
  int total = 0;
  for (int n : images) total += n;
  std::vector<size_t> starts;
  if (images.empty()) return starts;
  starts.push_back(0);
  const int target = std::min(per_group, (total + groups - 1) / std::max(groups, 1));
  int in_group = 0;
  for (size_t i = 0; i < images.size(); ++i) {
    if (in_group > 0 && in_group + images[i] > target && int(starts.size()) < groups) {
      starts.push_back(i);
      in_group = 0;
    }
    in_group += images[i];
  }
  return starts;
}

std::vector<size_t> engine_batches(const std::vector<int>& images, size_t begin, size_t end, int per_group) {
  std::vector<size_t> starts;
  int n = 0;
  for (size_t i = begin; i < end; ++i) {
    if (starts.empty() || n + images[i] > per_group) {
      starts.push_back(i);
      n = 0;
    }
    n += images[i];
  }
  return starts;
}

namespace {

class DataParallelEngine final : public Engine {
 public:
  DataParallelEngine(std::vector<std::unique_ptr<Engine>> engines, const ParallelPlan& plan)
      : engines_(std::move(engines)), info_(engines_[0]->info()) {
    info_.parallel = "data";
    info_.parallel_comm = "";
    info_.gpus = plan.gpus;
  }
  const EngineInfo& info() const override { return info_; }
  const ModelLimits& limits() const override { return engines_[0]->limits(); }
  GenerateRequest resolve(const GenerateRequest& req) const override { return engines_[0]->resolve(req); }
  GenerateResult generate(const GenerateRequest& req, const ProgressFn& progress,
                          const std::atomic<bool>* cancel) override {
    return engines_[next_++ % engines_.size()]->generate(req, progress, cancel);
  }
  Tensor encode_prompt(const std::string& prompt) override { return engines_[0]->encode_prompt(prompt); }
  std::string enhance_prompt(const std::string& prompt, int width, int height) override {
    return engines_[0]->enhance_prompt(prompt, width, height);
  }
  int scale_factor() const override { return engines_[0]->scale_factor(); }
  std::vector<std::pair<int, int>> supported_sizes() const override { return engines_[0]->supported_sizes(); }
  bool turbo() const override { return engines_[0]->turbo(); }
  const std::string& model_dir() const override { return engines_[0]->model_dir(); }
  bool has_prompt_enhancer() const override { return engines_[0]->has_prompt_enhancer(); }
  size_t max_prompt_tokens() const override { return engines_[0]->max_prompt_tokens(); }
  LoadCounts load_counts() const override {
    LoadCounts sum;
    for (const auto& e : engines_) {
      const LoadCounts c = e->load_counts();
      sum.text_encoder += c.text_encoder, sum.prompt_enhancer += c.prompt_enhancer, sum.denoiser += c.denoiser;
    }
    return sum;
  }
  std::vector<LoraLibrary::Available> available_loras() const override { return engines_[0]->available_loras(); }
  int max_batch_images() const override { return int(engines_.size()) * engines_[0]->max_batch_images(); }

  // Group k on engine k at the same time (group 0 on the calling thread, which alone reports progress).
  std::vector<GenerateResult> generate_batch(const std::vector<GenerateRequest>& reqs, const ProgressFn& progress,
                                             const std::atomic<bool>* cancel) override {
    ERNIE_CHECK(!reqs.empty(), "generate_batch: no requests");
    std::vector<int> images;
    for (const GenerateRequest& r : reqs) images.push_back(engines_[0]->resolve(r).num_images);
    const int per_engine = engines_[0]->max_batch_images();
    const std::vector<size_t> starts = split_batch(images, int(engines_.size()), per_engine);
    std::vector<std::vector<GenerateResult>> out(starts.size());
    std::vector<std::exception_ptr> errors(starts.size());
    auto run = [&](size_t k) {
      try {
        const size_t end = k + 1 < starts.size() ? starts[k + 1] : reqs.size();
        const std::vector<size_t> pieces = engine_batches(images, starts[k], end, per_engine);
        for (size_t p = 0; p < pieces.size(); ++p) {
          const size_t to = p + 1 < pieces.size() ? pieces[p + 1] : end;
          const std::vector<GenerateRequest> batch(reqs.begin() + ptrdiff_t(pieces[p]), reqs.begin() + ptrdiff_t(to));
          for (GenerateResult& r : engines_[k]->generate_batch(batch, k == 0 ? progress : ProgressFn{}, cancel))
            out[k].push_back(std::move(r));
        }
      } catch (...) {
        errors[k] = std::current_exception();
      }
    };
    std::vector<std::thread> threads;
    for (size_t k = 1; k < starts.size(); ++k) threads.emplace_back(run, k);
    run(0);
    for (std::thread& t : threads) t.join();
    for (const std::exception_ptr& e : errors)
      if (e) std::rethrow_exception(e);
    std::vector<GenerateResult> res;
    for (auto& group : out)
      for (GenerateResult& r : group) {
        if (starts.size() > 1) r.parallel = "data";
        res.push_back(std::move(r));
      }
    return res;
  }

 private:
  std::vector<std::unique_ptr<Engine>> engines_;
  EngineInfo info_;
  std::atomic<size_t> next_{0};
};

}  // namespace

std::unique_ptr<Engine> open_data_parallel(const EngineOptions& o, const ParallelPlan& plan, const ProgressFn& progress) {
  std::vector<std::unique_ptr<Engine>> engines;
  for (int r = 0; r < plan.ranks(); ++r) {
    EngineOptions e = o;
    e.parallel = "none";
    e.gpus.clear();
    e.parallel_local = 0;
    if (!plan.gpus.empty()) e.device = "cuda:" + std::to_string(plan.gpus[size_t(r)]);
    engines.push_back(Engine::open(e, r == 0 ? progress : ProgressFn{}));
  }
  return std::make_unique<DataParallelEngine>(std::move(engines), plan);
}

}  // namespace ernie
