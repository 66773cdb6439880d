// The server's job queue over a fake engine (no model): the history keeps images for repeated fetches and
// evicts by count and by bytes (410 with the reason), the running gauge counts only jobs still running (the
// page's header said "running 1" after a job ended), and preview events appear only while someone watches
// with previews on.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "server/job_queue.h"

using namespace ernie;
using namespace ernie::server;

namespace {

// Returns flat images at once; `gate_start` / `gate_end` hold it before the first and after the last step.
class FakeEngine : public Engine {
 public:
  std::mutex mu;
  std::condition_variable cv;
  bool gate_start = false, gate_end = false;
  bool at_start = false, at_end = false;

  void open_gates() {
    std::lock_guard<std::mutex> l(mu);
    gate_start = gate_end = false;
    cv.notify_all();
  }
  void wait_at(bool FakeEngine::*flag) {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(30), [&] { return this->*flag; }));
  }

  const EngineInfo& info() const override { return info_; }
  const ModelLimits& limits() const override { return limits_; }
  GenerateRequest resolve(const GenerateRequest& r) const override {
    GenerateRequest x = r;
    if (!x.width) x.width = 16;
    if (!x.height) x.height = 16;
    if (!x.steps) x.steps = 2;
    return x;
  }
  GenerateResult generate(const GenerateRequest& req, const ProgressFn& progress, const std::atomic<bool>*) override {
    GenerateResult res;
    res.resolved = resolve(req);
    res.revised_prompt = req.prompt;
    const GenerateRequest& r = res.resolved;
    pass(gate_start, at_start);
    // Latents as the DiT sees them: [n, 4L, h, w].
    Tensor lat = Tensor::from_vector(std::vector<float>(size_t(r.num_images) * 32 * 2 * 3, 0.25f), {r.num_images, 32, 2, 3});
    for (int s = 1; s <= r.steps; ++s) {
      Progress p{"denoise", s, r.steps, 0};
      p.latents = &lat;
      if (progress) progress(p);
    }
    pass(gate_end, at_end);
    for (int k = 0; k < r.num_images; ++k)
      res.images.push_back(Image{r.width, r.height, std::vector<uint8_t>(size_t(r.width) * r.height * 3, uint8_t(40 + k)), {}});
    return res;
  }
  Tensor encode_prompt(const std::string&) override { return {}; }
  std::string enhance_prompt(const std::string& p, int, int) override { return p; }
  int scale_factor() const override { return 4; }
  std::vector<std::pair<int, int>> supported_sizes() const override { return {{16, 16}}; }
  bool turbo() const override { return true; }
  const std::string& model_dir() const override { return dir_; }
  bool has_prompt_enhancer() const override { return false; }
  size_t max_prompt_tokens() const override { return 0; }

 private:
  void pass(bool& gate, bool& at) {
    std::unique_lock<std::mutex> l(mu);
    at = true;
    cv.notify_all();
    cv.wait(l, [&] { return !gate; });
  }
  EngineInfo info_;
  ModelLimits limits_;
  std::string dir_ = "fake";
};

struct Fixture {
  explicit Fixture(QueueOptions opt) {
    auto e = std::make_unique<FakeEngine>();
    engine = e.get();
    queue = std::make_unique<JobQueue>(std::move(e), opt, metrics);
  }
  JobPtr run(const std::string& prompt) {
    GenerateRequest r;
    r.prompt = prompt;
    r.seed = 7;
    JobPtr j = queue->submit(queue->pipeline().resolve(r));
    EXPECT_TRUE(queue->wait_finished(j, std::chrono::seconds(30)));
    EXPECT_EQ(j->state, JobState::Succeeded);
    return j;
  }
  int status_of_fetch(const JobPtr& j, std::string* message = nullptr) {
    try {
      queue->images(j, 0);
      return 200;
    } catch (const ApiException& e) {
      if (message) *message = e.error.message;
      return e.error.status;
    }
  }
  Metrics metrics;
  FakeEngine* engine = nullptr;
  std::unique_ptr<JobQueue> queue;
};

std::vector<std::string> event_types(JobQueue& q, const JobPtr& j) {
  bool finished = false;
  std::vector<std::string> out;
  for (const JobEvent& e : q.events_after(j, 0, std::chrono::milliseconds(0), &finished)) out.push_back(e.type);
  return out;
}

}  // namespace

TEST(ServerHistory, ImagesAreFetchedAgainUntilEvictedByCount) {
  QueueOptions opt;
  opt.history = 2;
  Fixture f(opt);
  JobPtr a = f.run("a"), b = f.run("b");
  const auto first = f.queue->images(a, 0), second = f.queue->images(a, 0);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].second, second[0].second);
  EXPECT_EQ(f.queue->images(a, -1).size(), 1u);
  EXPECT_EQ(f.queue->history_size().first, 2);
  JobPtr c = f.run("c");  // the third job pushes the oldest out
  std::string why;
  EXPECT_EQ(f.status_of_fetch(a, &why), 410);
  EXPECT_NE(why.find("evicted from the history"), std::string::npos) << why;
  EXPECT_EQ(f.status_of_fetch(b), 200);
  EXPECT_EQ(f.status_of_fetch(c), 200);
  EXPECT_EQ(f.queue->history_size().first, 2);
  EXPECT_EQ(f.queue->describe(*a)["images_available"], 0);
  EXPECT_EQ(f.queue->describe(*b)["data"][0]["url"], "/v1/files/" + b->id + "-0.png");
  // Listed newest first.
  std::vector<JobPtr> all = f.queue->list(10);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0]->id, c->id);
  EXPECT_EQ(all[2]->id, a->id);
}

TEST(ServerHistory, EvictedByBytesButTheNewestStays) {
  QueueOptions opt;
  opt.history_bytes = 1;  // smaller than any PNG: only the newest job is kept
  Fixture f(opt);
  JobPtr a = f.run("a");
  EXPECT_EQ(f.status_of_fetch(a), 200);
  JobPtr b = f.run("b");
  EXPECT_EQ(f.status_of_fetch(a), 410);
  EXPECT_EQ(f.status_of_fetch(b), 200);
  auto [jobs, bytes] = f.queue->history_size();
  EXPECT_EQ(jobs, 1);
  EXPECT_EQ(bytes, f.queue->images(b, 0)[0].second.size());
  f.queue->remove(b);  // DELETE
  std::string why;
  EXPECT_EQ(f.status_of_fetch(b, &why), 410);
}

TEST(ServerHistory, RunningGaugeCountsOnlyRunningJobs) {
  Fixture f(QueueOptions{});
  f.engine->gate_start = true;
  GenerateRequest r;
  r.prompt = "held";
  JobPtr j = f.queue->submit(f.queue->pipeline().resolve(r));
  f.engine->wait_at(&FakeEngine::at_start);
  EXPECT_EQ(f.queue->gauges().running, 1);
  ASSERT_TRUE(f.queue->cancel(j, ApiError{409, "cancelled", "invalid_request_error", "", "cancelled"}));
  // The engine is still busy with the batch, but no job of it runs any more.
  EXPECT_EQ(f.queue->gauges().running, 0);
  f.engine->open_gates();
  EXPECT_TRUE(f.queue->wait_finished(j, std::chrono::seconds(30)));
}

TEST(ServerHistory, PreviewsOnlyWhileWatchedAndEnabled) {
  for (int mode = 0; mode < 3; ++mode) {  // 0: watched, previews on; 1: nobody watches; 2: watched, --preview none
    QueueOptions opt;
    opt.preview = mode != 2;
    Fixture f(opt);
    f.engine->gate_start = f.engine->gate_end = true;
    GenerateRequest r;
    r.prompt = "watched";
    r.steps = 3;
    JobPtr j = f.queue->submit(f.queue->pipeline().resolve(r));
    f.engine->wait_at(&FakeEngine::at_start);
    if (mode != 1) f.queue->watch(j, +1);
    {
      std::lock_guard<std::mutex> l(f.engine->mu);
      f.engine->gate_start = false;
      f.engine->cv.notify_all();
    }
    f.engine->wait_at(&FakeEngine::at_end);
    bool finished = false;
    int previews = 0;
    for (const JobEvent& e : f.queue->events_after(j, 0, std::chrono::milliseconds(0), &finished)) {
      if (e.type != "preview") continue;
      ++previews;
      const auto d = nlohmann::json::parse(e.data);
      EXPECT_EQ(d["step"], 3);  // only the newest is kept
      EXPECT_EQ(d["width"], 6);
      EXPECT_EQ(d["height"], 4);
      EXPECT_EQ(d["image"].get<std::string>().rfind("data:image/png;base64,", 0), 0u);
    }
    EXPECT_EQ(previews, mode == 0 ? 1 : 0) << "mode " << mode;
    f.engine->open_gates();
    EXPECT_TRUE(f.queue->wait_finished(j, std::chrono::seconds(30)));
    for (const std::string& t : event_types(*f.queue, j)) EXPECT_NE(t, "preview");  // none once it ended
    if (mode != 1) f.queue->watch(j, -1);
  }
}
