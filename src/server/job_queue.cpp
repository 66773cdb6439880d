#include "server/job_queue.h"

#include "server/request_json.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <random>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "core/error.h"
#include "io/png.h"
#include "engine/latent_preview.h"
#include "engine/metadata.h"
#include "engine/noise.h"
#include "server/form_data.h"
#include "server/request_json.h"

namespace ernie::server {
namespace {
using nlohmann::json;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

BatchKey key_of(const GenerateRequest& r) {
  BatchKey k{r.width, r.height, r.steps, r.cfg, r.use_pe, int(r.sampler), r.shift, {}};
  for (const LoraRef& l : r.loras) k.loras.push_back({l.path, l.scale});
  k.strength = r.strength;
  k.image = r.init_image.has_value();
  k.mask = r.mask.has_value();
  return k;
}

// Gives freed heap pages back to the system once the server goes idle, so its resident memory returns
// to the idle level after a burst of large requests.
void return_free_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}
}  // namespace

std::string file_name(const std::string& job_id, int index) { return job_id + "-" + std::to_string(index) + ".png"; }

const char* state_name(JobState s) {
  switch (s) {
    case JobState::Queued: return "queued";
    case JobState::Running: return "running";
    case JobState::Succeeded: return "succeeded";
    case JobState::Failed: return "failed";
    case JobState::Cancelled: return "cancelled";
  }
  return "?";
}

JobQueue::JobQueue(std::unique_ptr<Engine> pipeline, QueueOptions opt, Metrics& metrics)
    : pipeline_(std::move(pipeline)), opt_(std::move(opt)), metrics_(metrics) {
  ERNIE_CHECK(pipeline_ != nullptr, "server: no pipeline");
  ERNIE_CHECK(opt_.max_queue >= 1, "server: --max-queue must be at least 1, got ", std::to_string(opt_.max_queue));
  int cap = opt_.batching ? pipeline_->max_batch_images() : 1;
  opt_.batch.max_images = opt_.batch.max_images > 1 ? std::min(opt_.batch.max_images, cap) : cap;
  id_salt_ = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  worker_thread_ = std::thread([this] { worker(); });
}

JobQueue::~JobQueue() {
  if (worker_thread_.joinable()) {
    begin_shutdown();
    finish(0);
  }
}

std::string JobQueue::new_id() {
  // splitmix64 of a salted counter: unique, and not guessable from another job's id.
  uint64_t z = (++id_counter_) * 0x9E3779B97F4A7C15ull + id_salt_;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  char b[32];
  std::snprintf(b, sizeof b, "job_%016llx", (unsigned long long)z);
  return b;
}

JobPtr JobQueue::submit(const GenerateRequest& resolved) {
  std::lock_guard<std::mutex> l(mu_);
  if (stopping_) throw ApiException{shutting_down()};
  if (int(waiting_.size()) >= opt_.max_queue) throw ApiException{queue_full(opt_.max_queue)};
  prune();
  auto j = std::make_shared<Job>();
  j->id = new_id();
  j->req = resolved;
  j->created = Clock::now();
  j->created_unix = int64_t(std::time(nullptr));
  j->total = resolved.steps;
  jobs_[j->id] = j;
  waiting_.push_back(j);
  push_event(*j, "queued", {{"id", j->id}, {"status", "queued"}, {"position", int(waiting_.size()) - 1}});
  work_cv_.notify_one();
  return j;
}

JobPtr JobQueue::find(const std::string& id) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second;
}

void JobQueue::push_event(Job& j, const std::string& type, json data) {
  const int64_t id = ++j.last_event_id;
  // Only the newest preview is kept for streams that connect later (ids stay increasing).
  if (type == "preview")
    j.events.erase(std::remove_if(j.events.begin(), j.events.end(), [](const JobEvent& e) { return e.type == "preview"; }),
                   j.events.end());
  j.events.push_back({id, type, data.dump(-1, ' ', false, json::error_handler_t::replace)});
  change_cv_.notify_all();
}

json JobQueue::params_json(const Job& j) const { return request_to_json({j.req, true, false}, false); }

int JobQueue::position(const Job& j) const {
  for (size_t i = 0; i < waiting_.size(); ++i)
    if (waiting_[i].get() == &j) return int(i);
  return -1;
}

json JobQueue::describe(const Job& j) const {
  std::lock_guard<std::mutex> l(mu_);
  json o = {{"id", j.id},
            {"object", "image.job"},
            {"status", state_name(j.state)},
            {"created", j.created_unix},
            {"phase", j.phase},
            {"step", j.step},
            {"total", j.total},
            {"params", params_json(j)}};
  if (j.state == JobState::Queued) o["queue_position"] = position(j);
  if (j.state == JobState::Succeeded) {
    const int n = j.req.num_images;
    o["images"] = n;
    o["images_available"] = j.released ? 0 : int(j.png.size());
    // The images while the history keeps them: each one's file URL (GET, repeatable) and seed.
    json data = json::array();
    if (!j.released)
      for (int i = 0; i < int(j.png.size()); ++i)
        data.push_back({{"index", i}, {"url", "/v1/files/" + file_name(j.id, i)}, {"seed", image_seed(j.req.seed, i, j.req.rng)},
                        {"bytes", j.png[size_t(i)].size()}});
    o["data"] = std::move(data);
    if (j.released && !j.gone_why.empty()) o["images_gone"] = j.gone_why;
    o["revised_prompt"] = j.revised_prompt;
    o["truncated"] = j.truncated;
  }
  if (j.state != JobState::Queued) {
    Clock::time_point end = is_terminal(j.state) ? j.finished : Clock::now();
    json t = {{"queued_s", seconds((j.started == Clock::time_point{} ? end : j.started) - j.created)}};
    if (j.state == JobState::Succeeded) {
      t["encode_s"] = j.encode_s;
      t["denoise_s"] = j.denoise_s;
      t["decode_s"] = j.decode_s;
      t["lora_switch_s"] = j.lora_switch_s;
    }
    if (j.started != Clock::time_point{}) t["run_s"] = seconds(end - j.started);
    o["timings"] = t;
    o["batch_size"] = j.batch_size;
  }
  if (j.error) o["error"] = j.error->to_json()["error"];
  return o;
}

// job id=J size=WxH steps=N images=K status=S seconds=T (from submission) queued_s=Q [code=C]
void JobQueue::log_job(const Job& j) const {
  const bool ran = j.started != Clock::time_point{};
  std::fprintf(stderr, "job id=%s size=%dx%d steps=%d images=%d status=%s seconds=%.3f queued_s=%.3f%s%s\n",
               j.id.c_str(), j.req.width, j.req.height, j.req.steps, j.req.num_images, state_name(j.state),
               seconds(j.finished - j.created), seconds((ran ? j.started : j.finished) - j.created),
               j.error ? " code=" : "", j.error ? j.error->code.c_str() : "");
}

void JobQueue::finish_job(Job& j, JobState s, std::optional<ApiError> err) {
  j.state = s;
  j.finished = Clock::now();
  j.error = std::move(err);
  if (s != JobState::Succeeded) j.released = true;
  // Previews are of no use once the job has ended: a stream that connects later gets none.
  j.events.erase(std::remove_if(j.events.begin(), j.events.end(), [](const JobEvent& e) { return e.type == "preview"; }),
                 j.events.end());
  metrics_.count_job(state_name(s));
  // Keep the replayable history short: the first event, the last progress event of each phase (a stream that
  // connects after the end still sees which phases ran: load, encode, denoise, decode), and the end.
  if (j.events.size() > 2) {
    std::vector<JobEvent> kept{j.events.front()};
    std::vector<std::string> phases;
    for (auto e = j.events.rbegin(); e != j.events.rend() - 1; ++e) {
      if (e->type != "progress") continue;
      const json d = json::parse(e->data, nullptr, false);
      const std::string phase = d.is_object() ? d.value("phase", std::string()) : std::string();
      if (std::find(phases.begin(), phases.end(), phase) != phases.end()) continue;
      phases.push_back(phase);
      kept.insert(kept.begin() + 1, *e);
    }
    j.events = std::move(kept);
  }
  if (opt_.log_jobs) log_job(j);
  json d = {{"id", j.id}, {"status", state_name(s)}};
  if (s == JobState::Succeeded) {
    d["images"] = int(j.png.size());
    d["revised_prompt"] = j.revised_prompt;
    d["truncated"] = j.truncated;
    d["seed"] = j.req.seed;
    d["timings"] = {{"encode_s", j.encode_s}, {"denoise_s", j.denoise_s}, {"decode_s", j.decode_s},
                    {"lora_switch_s", j.lora_switch_s}};
    push_event(j, "done", d);
  } else {
    if (j.error) d["error"] = j.error->to_json()["error"];
    push_event(j, s == JobState::Failed ? "error" : "cancelled", d);
  }
}

bool JobQueue::cancel(const JobPtr& j, const ApiError& why) {
  std::lock_guard<std::mutex> l(mu_);
  if (is_terminal(j->state)) return false;
  if (j->state == JobState::Queued) {
    waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), j), waiting_.end());
    finish_job(*j, JobState::Cancelled, why);
    return true;
  }
  finish_job(*j, JobState::Cancelled, why);
  if (running_) {
    bool all = std::all_of(running_->jobs.begin(), running_->jobs.end(),
                           [](const JobPtr& x) { return is_terminal(x->state); });
    if (all) running_->cancel = true;  // nobody needs this batch any more: stop at the next step
  }
  return true;
}

void JobQueue::remove(const JobPtr& j) {
  std::lock_guard<std::mutex> l(mu_);
  j->png.clear();
  j->png.shrink_to_fit();
  j->png_bytes = 0;
  j->released = true;
  j->gone_why = "deleted";
  if (is_terminal(j->state)) jobs_.erase(j->id);
}

void JobQueue::wait_finished(const JobPtr& j) {
  std::unique_lock<std::mutex> l(mu_);
  change_cv_.wait(l, [&] { return is_terminal(j->state); });
}

bool JobQueue::wait_finished(const JobPtr& j, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  return change_cv_.wait_for(l, timeout, [&] { return is_terminal(j->state); });
}

std::vector<JobEvent> JobQueue::events_after(const JobPtr& j, int64_t after, std::chrono::milliseconds timeout,
                                             bool* finished) {
  std::unique_lock<std::mutex> l(mu_);
  auto ready = [&] { return !j->events.empty() && j->events.back().id > after; };
  change_cv_.wait_for(l, timeout, ready);
  std::vector<JobEvent> out;
  for (const JobEvent& e : j->events)
    if (e.id > after) out.push_back(e);
  *finished = is_terminal(j->state);
  return out;
}

std::vector<std::pair<int, std::string>> JobQueue::images(const JobPtr& j, int index) {
  std::lock_guard<std::mutex> l(mu_);
  auto conflict = [&](const std::string& msg, const std::string& code) {
    throw ApiException{ApiError{409, msg, "invalid_request_error", "", code}};
  };
  if (!is_terminal(j->state)) conflict("job " + j->id + " is still " + state_name(j->state) + "; wait for it to finish", "not_ready");
  if (j->state == JobState::Failed)
    conflict("job " + j->id + " failed: " + (j->error ? j->error->message : std::string("unknown error")), "job_failed");
  if (j->state == JobState::Cancelled) conflict("job " + j->id + " was cancelled", "job_cancelled");
  if (index >= j->req.num_images || (!j->released && index >= int(j->png.size())))
    throw ApiException{not_found("job " + j->id + " has " + std::to_string(j->req.num_images) +
                                 " image(s); there is no image " + std::to_string(index))};
  if (j->released)
    throw ApiException{ApiError{410, "the images of job " + j->id + " are gone: " +
                                         (j->gone_why.empty() ? std::string("released") : j->gone_why),
                                "invalid_request_error", "", "gone"}};
  std::vector<std::pair<int, std::string>> out;
  for (int i = 0; i < int(j->png.size()); ++i)
    if (index < 0 || i == index) out.emplace_back(i, j->png[size_t(i)]);
  return out;
}

std::vector<JobPtr> JobQueue::list(size_t limit) const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<JobPtr> all;
  for (auto& [id, j] : jobs_) all.push_back(j);
  std::sort(all.begin(), all.end(), [](const JobPtr& a, const JobPtr& b) {
    return a->created != b->created ? a->created > b->created : a->id > b->id;
  });
  if (all.size() > limit) all.resize(limit);
  return all;
}

void JobQueue::watch(const JobPtr& j, int delta) {
  std::lock_guard<std::mutex> l(mu_);
  j->listeners = std::max(0, j->listeners + delta);
}

std::pair<int, size_t> JobQueue::history_size() const {
  std::lock_guard<std::mutex> l(mu_);
  int n = 0;
  size_t bytes = 0;
  for (auto& [id, j] : jobs_)
    if (j->state == JobState::Succeeded && !j->released) ++n, bytes += j->png_bytes;
  return {n, bytes};
}

void JobQueue::prune() {
  const Clock::time_point now = Clock::now();
  // The history: finished jobs with images, newest first; keep the first `history` of them within
  // `history_bytes` (the newest always), evict the rest.
  std::vector<JobPtr> stored;
  for (auto& [id, j] : jobs_)
    if (j->state == JobState::Succeeded && !j->released) stored.push_back(j);
  std::sort(stored.begin(), stored.end(), [](const JobPtr& a, const JobPtr& b) { return a->finished > b->finished; });
  size_t bytes = 0;
  for (size_t i = 0; i < stored.size(); ++i) {
    Job& j = *stored[i];
    bytes += j.png_bytes;
    const bool too_many = int(i) >= std::max(1, opt_.history);
    const bool too_big = i > 0 && bytes > opt_.history_bytes;
    if (!too_many && !too_big) continue;
    char why[160];
    std::snprintf(why, sizeof why, "evicted from the history (the server keeps the images of the last %d jobs, "
                  "at most %.1f MiB: serve --history, --history-mib)", opt_.history, double(opt_.history_bytes) / (1 << 20));
    j.png.clear();
    j.png.shrink_to_fit();
    j.png_bytes = 0;
    j.released = true;
    j.gone_why = why;
    ++metrics_.results_expired;
  }
  std::vector<JobPtr> done;
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    const Job& j = *it->second;
    bool finished = is_terminal(j.state) && j.released;
    if (finished && seconds(now - j.finished) > opt_.record_ttl_s) {
      it = jobs_.erase(it);
      continue;
    }
    if (finished) done.push_back(it->second);
    ++it;
  }
  if (done.size() > opt_.max_records) {
    std::sort(done.begin(), done.end(), [](const JobPtr& a, const JobPtr& b) { return a->finished < b->finished; });
    for (size_t i = 0; i + opt_.max_records < done.size(); ++i) jobs_.erase(done[i]->id);
  }
}

void JobQueue::worker() {
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    work_cv_.wait_for(l, std::chrono::seconds(1), [&] { return !waiting_.empty() || worker_exit_; });
    prune();
    if (waiting_.empty()) {
      if (worker_exit_) break;
      continue;
    }
    std::vector<Waiting> w;
    for (size_t i = 0; i < waiting_.size() && i < 64; ++i) w.push_back({key_of(waiting_[i]->req), waiting_[i]->req.num_images});
    std::vector<size_t> pick = choose_batch(w, cost_, opt_.batch);
    auto b = std::make_shared<Batch>();
    for (size_t i : pick) b->jobs.push_back(waiting_[i]);
    for (auto it = pick.rbegin(); it != pick.rend(); ++it) waiting_.erase(waiting_.begin() + long(*it));
    const Clock::time_point now = Clock::now();
    for (const JobPtr& j : b->jobs) {
      j->state = JobState::Running;
      j->started = now;
      j->batch_size = int(b->jobs.size());
      j->phase = "start";
      metrics_.queue_wait_seconds.observe(seconds(now - j->created));
      push_event(*j, "progress", {{"phase", "start"}, {"step", 0}, {"total", j->total}});
    }
    if (b->jobs.size() > 1) {
      ++metrics_.batches_run;
      metrics_.batched_jobs += b->jobs.size();
    }
    running_ = b;
    last_step_time_ = {};
    l.unlock();
    run_batch(b);
    l.lock();
    running_.reset();
    change_cv_.notify_all();
    if (waiting_.empty()) {
      l.unlock();
      return_free_memory();
      l.lock();
    }
  }
}

void JobQueue::on_progress(const std::shared_ptr<Batch>& b, const Progress& p) {
  // Live previews (serve --preview fast): for each job someone is watching, the first image's latents
  // projected to RGB (engine/latent_preview.h) as a small PNG. Made outside the lock; never fails a job.
  std::vector<std::pair<JobPtr, json>> previews;
  if (opt_.preview && p.latents && p.phase == "denoise" && p.step > 0) {
    std::vector<std::pair<JobPtr, int64_t>> want;  // job, its first row in the batch
    {
      std::lock_guard<std::mutex> l(mu_);
      int64_t row = 0;
      for (const JobPtr& j : b->jobs) {
        if (!is_terminal(j->state) && j->listeners > 0) want.emplace_back(j, row);
        row += j->req.num_images;
      }
    }
    for (auto& [j, row] : want) {
      try {
        const Tensor& x = *p.latents;
        if (x.shape().size() != 4 || row >= x.dim(0)) continue;
        Tensor host = x.narrow(row, 1).to(kCPU).to_f32();
        PreviewRgb im = latent_preview_rgb(host.f32(), x.dim(1), x.dim(2), x.dim(3));
        std::vector<uint8_t> bytes = encode_png(im.width, im.height, im.rgb, {});
        previews.emplace_back(j, json{{"step", p.step}, {"total", p.total}, {"width", im.width}, {"height", im.height},
                                      {"image", "data:image/png;base64," + base64_encode(std::string(bytes.begin(), bytes.end()))}});
      } catch (const std::exception&) {
        // no preview for this step
      }
    }
  }
  std::lock_guard<std::mutex> l(mu_);
  const Clock::time_point now = Clock::now();
  if (p.phase == "denoise") {
    if (p.step > 0 && last_step_time_ != Clock::time_point{}) metrics_.step_seconds.observe(seconds(now - last_step_time_));
    last_step_time_ = now;
  }
  for (const JobPtr& j : b->jobs) {
    if (is_terminal(j->state)) continue;
    // The job's step/total count denoising steps; events carry every phase's own counts.
    if (p.phase == "denoise") {
      j->step = p.step;
      j->total = p.total;
    }
    j->phase = p.phase;
    push_event(*j, "progress", {{"phase", p.phase}, {"step", p.step}, {"total", p.total}});
  }
  for (auto& [j, d] : previews)
    if (!is_terminal(j->state)) push_event(*j, "preview", std::move(d));
}

void JobQueue::run_batch(const std::shared_ptr<Batch>& b) {
  std::vector<GenerateRequest> reqs;
  int images = 0;
  for (const JobPtr& j : b->jobs) {
    reqs.push_back(j->req);  // immutable after submit
    images += j->req.num_images;
  }
  ProgressFn progress = [this, b](const Progress& p) { on_progress(b, p); };
  const Clock::time_point t0 = Clock::now();
  std::optional<ApiError> failure;
  try {
    std::vector<GenerateResult> results;
    if (reqs.size() == 1) results.push_back(pipeline_->generate(reqs[0], progress, &b->cancel));
    else results = pipeline_->generate_batch(reqs, progress, &b->cancel);
    ERNIE_CHECK(results.size() == reqs.size(), "pipeline returned ", std::to_string(results.size()), " results for ",
                std::to_string(reqs.size()), " requests");
    const double took = seconds(Clock::now() - t0);
    metrics_.job_seconds.observe(took);

    // Encode outside the lock; skip jobs cancelled meanwhile.
    std::vector<std::vector<std::string>> pngs(reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) {
      {
        std::lock_guard<std::mutex> l(mu_);
        if (is_terminal(b->jobs[i]->state)) continue;
      }
      const GenerateResult& r = results[i];
      for (size_t k = 0; k < r.images.size(); ++k) {
        const Image& im = r.images[k];
        const ImageMeta meta = image_meta(r, int(k), opt_.model_name, r.resolved.seed);
        std::vector<uint8_t> bytes = encode_png(im.width, im.height, im.rgb, png_metadata(meta));
        pngs[i].emplace_back(bytes.begin(), bytes.end());
      }
    }
    std::lock_guard<std::mutex> l(mu_);
    if (!b->cancel) cost_.record(key_of(reqs[0]), images, took);
    if (!results.empty() && results[0].lora_switch_s > 0) metrics_.lora_switch_seconds.observe(results[0].lora_switch_s);
    for (size_t i = 0; i < reqs.size(); ++i) {
      Job& j = *b->jobs[i];
      if (is_terminal(j.state)) continue;
      j.png = std::move(pngs[i]);
      j.png_bytes = 0;
      for (const std::string& p : j.png) j.png_bytes += p.size();
      j.revised_prompt = results[i].revised_prompt;
      j.truncated = results[i].prompt_truncated;
      j.encode_s = results[i].encode_s;
      j.denoise_s = results[i].denoise_s;
      j.decode_s = results[i].decode_s;
      j.lora_switch_s = results[i].lora_switch_s;
      metrics_.images_generated += j.png.size();
      finish_job(j, JobState::Succeeded, std::nullopt);
    }
    prune();  // the new images may push old ones out of the history
    return;
  } catch (const Cancelled&) {
    failure = stopping_ ? shutting_down() : ApiError{409, "cancelled", "invalid_request_error", "", "cancelled"};
  } catch (const OutOfMemory& e) {
    failure = ApiError{500, std::string("out of memory: ") + e.what() + "; try a smaller size or fewer images",
                       "server_error", "", "out_of_memory"};
  } catch (const Error& e) {
    failure = ApiError{500, std::string("generation failed: ") + e.what(), "server_error", "", "generation_failed"};
  } catch (const std::exception& e) {
    failure = ApiError{500, std::string("generation failed: ") + e.what(), "server_error", "", "internal_error"};
  }
  std::lock_guard<std::mutex> l(mu_);
  const bool cancelled = failure->code == "cancelled" || failure->code == "shutting_down";
  for (const JobPtr& j : b->jobs)
    if (!is_terminal(j->state)) finish_job(*j, cancelled ? JobState::Cancelled : JobState::Failed, failure);
}

void JobQueue::begin_shutdown() {
  std::lock_guard<std::mutex> l(mu_);
  stopping_ = true;
  for (const JobPtr& j : waiting_) finish_job(*j, JobState::Cancelled, shutting_down());
  waiting_.clear();
  change_cv_.notify_all();
}

void JobQueue::finish(double grace_s) {
  {
    std::unique_lock<std::mutex> l(mu_);
    auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(std::max(0.0, grace_s) * 1000));
    change_cv_.wait_until(l, deadline, [&] { return !running_; });
    if (running_) {
      for (const JobPtr& j : running_->jobs)
        if (!is_terminal(j->state)) finish_job(*j, JobState::Cancelled, shutting_down());
      running_->cancel = true;
    }
    worker_exit_ = true;
    work_cv_.notify_all();
  }
  if (worker_thread_.joinable()) worker_thread_.join();
}

QueueGauges JobQueue::gauges() const {
  std::lock_guard<std::mutex> l(mu_);
  QueueGauges g;
  g.queued = int(waiting_.size());
  // Jobs still running: a finished (or cancelled) job of the running batch no longer counts, though the
  // worker clears the batch only after it encodes and stores every image.
  g.running = 0;
  if (running_)
    for (const JobPtr& j : running_->jobs) g.running += j->state == JobState::Running;
  g.records = int(jobs_.size());
  for (auto& [id, j] : jobs_) {
    if (j->state != JobState::Succeeded || j->released) continue;
    ++g.stored_results;
    g.stored_result_bytes += j->png_bytes;
  }
  g.shutting_down = stopping_;
  return g;
}

}  // namespace ernie::server
