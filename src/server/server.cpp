#include "server/server.h"

#include <thread>

#include "core/error.h"
#include "engine/metadata.h"
#include "engine/noise.h"
#include "server/a1111_routes.h"
#include "server/http_common.h"
#include "server/model_info.h"

namespace ernie::server {
using nlohmann::json;

Server::Server(std::unique_ptr<Engine> pipeline, ServerOptions opt) : opt_(std::move(opt)) {
  ERNIE_CHECK(pipeline != nullptr, "server: no pipeline");
  model_name_ = model_display_name(pipeline->model_dir());
  opt_.queue.model_name = model_name_;
  info_ = pipeline->info();
  // Under an allocator cap (--max-vram) the plan covers one request at a time: no batching.
  if (info_.memory.limit_bytes) opt_.queue.batching = false;
  queue_ = std::make_unique<JobQueue>(std::move(pipeline), opt_.queue, metrics_);
  opt_.guard.api_key = opt_.api_key;  // 401 at head time, before a body is read
  http_ = make_http(
      {opt_.host, opt_.port, opt_.max_body_bytes, opt_.http_threads, opt_.guard, opt_.log_requests, opt_.streams},
      metrics_);
  routes();
}

Server::~Server() {
  if (queue_ && !queue_->stopping()) {
    queue_->begin_shutdown();
    queue_->finish(0);
  }
}


int Server::bind() {
  port_ = bind_http(*http_, opt_.host, opt_.port);
  return port_;
}

void Server::run() { http_->listen_after_bind(); }

void Server::shutdown(double grace_s) {
  queue_->begin_shutdown();
  queue_->finish(grace_s);
  closing_ = true;
  // Let open event streams send their last event before the listener goes away.
  for (int i = 0; i < 300 && streams_open_.load() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  http_->stop();
  http_->stop_guard();
}

bool Server::authorized(const httplib::Request& req) const { return bearer_ok(req, opt_.api_key); }

GenerateRequest Server::resolve_parsed(ParsedRequest p) const {
  p.req.seed_random = !p.seed_given;  // resolve draws it
  try {
    return queue_->pipeline().resolve(p.req);
  } catch (const Error& e) {
    bad_request(e.what(), param_of(e.what()), "invalid_value");
  }
}

json Server::model_info() const {
  json m = engine_json(queue_->pipeline(), model_name_);
  m["loras"] = !m["lora_list"].empty();
  m.erase("lora_list");
  m.erase("model_limits");
  m["limits"] = {{"max_images", opt_.limits.max_images},
                 {"max_steps", opt_.limits.max_steps},
                 {"max_side", opt_.limits.max_side},
                 {"max_queue", opt_.queue.max_queue},
                 {"max_body_bytes", opt_.max_body_bytes}};
  m["max_batch_images"] = queue_->max_batch_images();
  // What the page may offer besides: live previews, and the history's bounds.
  m["preview"] = opt_.queue.preview ? "fast" : "none";
  m["history"] = {{"max_jobs", opt_.queue.history}, {"max_bytes", opt_.queue.history_bytes}};
  m["api_key_required"] = !opt_.api_key.empty();
  return m;
}

void Server::handle_generations(const httplib::Request& req, httplib::Response& res,
                                const std::function<ParsedRequest()>& parse) {
  if (!authorized(req)) return send_error(res, unauthorized());
  if (queue_->stopping()) return send_error(res, shutting_down());
  ParsedRequest parsed = parse();
  const bool url = parsed.url;
  const OutputFormat output = parsed.output;
  JobPtr job = queue_->submit(resolve_parsed(std::move(parsed)));
  res.set_header("X-Job-Id", job->id);
  // The client waits on this connection: when it goes away, nobody is left to take the images.
  while (!queue_->wait_finished(job, std::chrono::milliseconds(200)))
    if (client_gone()) {
      queue_->cancel(job, ApiError{499, "the client closed the connection", "invalid_request_error", "",
                                   "client_closed"});
      queue_->wait_finished(job);
      queue_->remove(job);
      return;
    }
  if (job->state != JobState::Succeeded) {
    ApiError e = job->error.value_or(ApiError{500, "job ended without a result", "server_error", "", "internal_error"});
    queue_->remove(job);
    return send_error(res, e);
  }
  // The job stays in the history: its images can be fetched again (and listed by GET /v1/jobs).
  json data = json::array();
  for (auto& [i, png] : queue_->images(job, -1)) {
    json d = {{"revised_prompt", job->revised_prompt}, {"seed", image_seed(job->req.seed, i, job->req.rng)}};
    if (url) d["url"] = file_url(req, opt_.host, port_, job->id, i);
    else d["b64_json"] = base64_encode(encode_output(png, output));
    data.push_back(std::move(d));
  }
  json out = {{"created", job->created_unix}, {"output_format", image_format_name(output.format)}, {"data", std::move(data)}, {"id", job->id}, {"seed", job->req.seed},
              {"size", size_str(job->req.width, job->req.height)}, {"steps", job->req.steps},
              {"guidance_scale", job->req.cfg}, {"truncated", job->truncated}};
  send_json(res, 200, out);
}

void Server::handle_submit(const httplib::Request& req, httplib::Response& res, const std::string& body) {
  if (!authorized(req)) return send_error(res, unauthorized());
  if (queue_->stopping()) return send_error(res, shutting_down());
  JobPtr job = queue_->submit(resolve_parsed(parse_generation_request(body, opt_.limits)));
  res.set_header("Location", "/v1/jobs/" + job->id);
  send_json(res, 202, queue_->describe(*job));
}

namespace {
// A job's events for its stream, polled on the streams' thread without waiting (server/event_streams.h).
class JobEvents : public EventSource {
 public:
  JobEvents(JobQueue& q, JobPtr job, int64_t after, const std::atomic<bool>& closing, std::atomic<int>& open)
      : q_(q), job_(std::move(job)), last_(after), closing_(closing), open_(open) {
    ++open_;
    q_.watch(job_, +1);  // previews are made while a stream is open
  }
  ~JobEvents() override {
    q_.watch(job_, -1);
    --open_;
  }
  bool poll(std::string& out) override {
    bool finished = false;
    for (const JobEvent& e : q_.events_after(job_, last_, std::chrono::milliseconds(0), &finished)) {
      out += sse_event(std::to_string(e.id), e.type, e.data);
      last_ = e.id;
    }
    return !finished && !closing_;
  }

 private:
  JobQueue& q_;
  JobPtr job_;
  int64_t last_;
  const std::atomic<bool>& closing_;
  std::atomic<int>& open_;
};
}  // namespace

void Server::handle_events(const httplib::Request& req, httplib::Response& res, const JobPtr& job) {
  int64_t after = 0;
  const std::string last = req.get_header_value("Last-Event-ID");
  if (!last.empty() && last.size() < 19 && last.find_first_not_of("0123456789") == std::string::npos)
    after = std::stoll(last);
  http_->open_event_stream(res, std::make_unique<JobEvents>(*queue_, job, after, closing_, streams_open_));
}

void Server::routes() {
  httplib::Server& s = *http_;
  auto guard = [](auto fn) { return guarded(fn); };
  auto with_body = [this](auto fn) { return server::with_body(opt_.max_body_bytes, fn); };
  auto job_route = [this, guard](auto fn) {
    return guard([this, fn](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req)) return send_error(res, unauthorized());
      JobPtr job = queue_->find(req.matches[1]);
      if (!job) return send_error(res, not_found("no job '" + std::string(req.matches[1]) + "' (unknown, or released)"));
      fn(req, res, job);
    });
  };

  s.Post("/v1/images/generations", with_body([this](auto& req, auto& res, const std::string& body) {
    handle_generations(req, res, [&] { return parse_generation_request(body, opt_.limits); });
  }));
  // OpenAI's edits: multipart/form-data (httplib parses the parts), or JSON with the image in base64.
  auto edits_json = with_body([this](auto& req, auto& res, const std::string& body) {
    handle_generations(req, res, [&] { return parse_generation_request(body, opt_.limits, true); });
  });
  s.Post("/v1/images/edits", [this, guard, edits_json](const httplib::Request& req, httplib::Response& res,
                                                       const httplib::ContentReader& reader) {
    if (!req.is_multipart_form_data()) return edits_json(req, res, reader);
    std::vector<FormPart> parts;
    if (!read_form(req, reader, opt_.max_body_bytes, parts, res)) return;
    guard([&](const httplib::Request& rq, httplib::Response& rs) {
      handle_generations(rq, rs, [&] { return parse_edit_form(parts, opt_.limits); });
    })(req, res);
  });
  s.Post("/v1/jobs", with_body([this](auto& req, auto& res, const std::string& body) { handle_submit(req, res, body); }));
  // The job records, newest first: waiting, running, and the history (finished jobs whose images are kept,
  // each with data[].url), then older records whose images are gone. ?limit=N (default 100, at most 1000).
  s.Get("/v1/jobs", guard([this](auto& req, auto& res) {
    if (!authorized(req)) return send_error(res, unauthorized());
    const size_t limit = list_limit(req);
    json data = json::array();
    for (const JobPtr& j : queue_->list(limit)) data.push_back(queue_->describe(*j));
    auto [jobs, bytes] = queue_->history_size();
    send_json(res, 200, {{"object", "list"}, {"data", std::move(data)},
                         {"history", {{"jobs", jobs}, {"bytes", bytes}, {"max_jobs", opt_.queue.history},
                                      {"max_bytes", opt_.queue.history_bytes}}}});
  }));
  // An image of the history by its file name (response_format "url", the jobs' data[].url): repeatable until
  // the history evicts it (410), or the record is gone too (404).
  s.Get(R"(/v1/files/(job_[A-Za-z0-9]{1,60})-([0-9]{1,4})\.png)", guard([this](auto& req, auto& res) {
    if (!authorized(req)) return send_error(res, unauthorized());
    JobPtr job = queue_->find(req.matches[1]);
    if (!job)
      return send_error(res, not_found("no file '" + std::string(req.matches[1]) + "-" + std::string(req.matches[2]) +
                                       ".png' (unknown, or its job record is gone)"));
    auto imgs = queue_->images(job, std::stoi(req.matches[2]));
    res.set_header("Cache-Control", "private, max-age=86400, immutable");
    res.set_header("Content-Disposition", "inline; filename=\"" + file_name(job->id, imgs[0].first) + "\"");
    res.status = 200;
    res.set_content(std::move(imgs[0].second), "image/png");
  }));

  const std::string id = R"(/v1/jobs/([A-Za-z0-9_]{1,64}))";
  s.Get(id, job_route([this](auto&, auto& res, const JobPtr& job) { send_json(res, 200, queue_->describe(*job)); }));
  s.Get(id + "/events", job_route([this](auto& req, auto& res, const JobPtr& job) { handle_events(req, res, job); }));
  s.Delete(id, job_route([this](auto&, auto& res, const JobPtr& job) {
    if (queue_->cancel(job, ApiError{409, "cancelled by DELETE /v1/jobs/" + job->id, "invalid_request_error", "",
                                     "cancelled"}))
      return send_json(res, 200, queue_->describe(*job));
    queue_->remove(job);
    send_json(res, 200, {{"id", job->id}, {"object", "image.job.deleted"}, {"deleted", true}});
  }));
  s.Get(id + "/images", job_route([this](auto&, auto& res, const JobPtr& job) {
    json data = json::array();
    for (auto& [i, png] : queue_->images(job, -1))
      data.push_back({{"index", i}, {"b64_json", base64_encode(png)}, {"revised_prompt", job->revised_prompt},
                      {"seed", image_seed(job->req.seed, i, job->req.rng)}});
    send_json(res, 200, {{"created", job->created_unix}, {"id", job->id}, {"data", std::move(data)}});
  }));
  s.Get(id + R"(/images/([0-9]{1,4}))", job_route([this](auto& req, auto& res, const JobPtr& job) {
    auto imgs = queue_->images(job, std::stoi(req.matches[2]));
    res.set_header("Cache-Control", "private, max-age=86400, immutable");
    res.set_header("Content-Disposition", "inline; filename=\"" + job->id + "-" + std::to_string(imgs[0].first) + ".png\"");
    res.status = 200;
    res.set_content(std::move(imgs[0].second), "image/png");
  }));

  s.Get("/v1/models", guard([this](auto& req, auto& res) {
    if (!authorized(req)) return send_error(res, unauthorized());
    send_json(res, 200,
              {{"object", "list"}, {"data", {{{"id", model_name_}, {"object", "model"}, {"owned_by", "ernie-image"}}}}});
  }));
  s.Get("/v1/loras", guard([this](auto& req, auto& res) {
    if (!authorized(req)) return send_error(res, unauthorized());
    json data = json::array();
    for (const LoraLibrary::Available& a : queue_->pipeline().available_loras())
      data.push_back({{"name", a.name}, {"bytes", a.bytes}, {"tag", "<lora:" + a.name + ":1>"}});
    send_json(res, 200, {{"object", "list"}, {"data", data}});
  }));
  s.Get("/v1/info", guard([this](auto& req, auto& res) {
    if (!authorized(req)) return send_error(res, unauthorized());
    send_json(res, 200, model_info());
  }));
  s.Get("/health", guard([this](auto&, auto& res) {
    QueueGauges g = queue_->gauges();
    send_json(res, g.shutting_down ? 503 : 200,
              {{"status", g.shutting_down ? "shutting_down" : "ok"}, {"model", model_name_}, {"queued", g.queued},
               {"running", g.running}, {"offload", offload_name(info_.memory.mode)},
               {"device", device_label(info_)}, {"dtype", dtype_label(info_)}});
  }));
  s.Get("/metrics", guard([this](auto&, auto& res) {
    res.status = 200;
    res.set_content(metrics_.render(queue_->gauges()), "text/plain; version=0.0.4");
  }));
  // The AUTOMATIC1111 API (/sdapi/v1/*) over the same queue (a1111_routes.h).
  register_a1111_routes(s, A1111Context{*queue_, opt_.api_key, opt_.limits, opt_.max_body_bytes, model_name_});
  add_web_page(s);
  add_fallback_handlers(s, metrics_, opt_.log_requests);
}

}  // namespace ernie::server
