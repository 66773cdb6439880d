#include "server/shared_server.h"

#include <unistd.h>

#include <cstdio>
#include <random>
#include <regex>

#include "core/error.h"
#include "engine/metadata.h"
#include "engine/noise.h"
#include "server/engine_runner.h"
#include "server/model_info.h"
#include "server/redis_metrics.h"
#include "server/request_json.h"

namespace ernie::server {
using nlohmann::json;
using std::chrono::milliseconds;

NodeRole parse_node_role(const std::string& s) {
  if (s == "all") return NodeRole::All;
  if (s == "api") return NodeRole::Api;
  if (s == "worker") return NodeRole::Worker;
  throw Error("--role '" + s + "' is unknown; use all, api or worker");
}

const char* role_name(NodeRole r) {
  return r == NodeRole::Api ? "api" : r == NodeRole::Worker ? "worker" : "all";
}

// Connections for the api routes: a request (or one poll of an event stream) takes one and gives it back,
// so a blocking read never holds up another request. At most as many as requests served at once.
class SharedServer::Pool {
 public:
  Pool(RedisUrl url, RedisQueueOptions opt) : url_(std::move(url)), opt_(std::move(opt)) {}
  class Lease {
   public:
    Lease(Pool& p, std::unique_ptr<RedisQueue> q) : p_(p), q_(std::move(q)) {}
    ~Lease() { p_.give_back(std::move(q_)); }
    RedisQueue* operator->() { return q_.get(); }

   private:
    Pool& p_;
    std::unique_ptr<RedisQueue> q_;
  };
  Lease get() {
    std::unique_ptr<RedisQueue> q;
    {
      std::lock_guard lk(mu_);
      if (!free_.empty()) {
        q = std::move(free_.back());
        free_.pop_back();
      }
    }
    if (!q) q = std::make_unique<RedisQueue>(url_, opt_);
    return Lease(*this, std::move(q));
  }

 private:
  void give_back(std::unique_ptr<RedisQueue> q) {
    std::lock_guard lk(mu_);
    free_.push_back(std::move(q));
  }
  RedisUrl url_;
  RedisQueueOptions opt_;
  std::mutex mu_;
  std::vector<std::unique_ptr<RedisQueue>> free_;
};

namespace {

ApiError queue_down(const std::exception& e) {
  return ApiError{503, std::string("the shared job queue (Redis) cannot be reached: ") + e.what(), "server_error", "",
                  "queue_unavailable"};
}

// Wraps a route: a Redis that cannot be reached is a 503 (after the client's retries), never a 500.
template <class F>
auto redis_guarded(F fn) {
  return [fn](auto&&... args) {
    try {
      fn(args...);
    } catch (const RedisError& e) {
      throw ApiException{queue_down(e)};
    }
  };
}

std::string new_job_id() {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  static const char* abc = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::lock_guard lk(mu);
  std::string id = "job_";
  for (int i = 0; i < 24; ++i) id += abc[rng() % 36];
  return id;
}

bool terminal_event(const std::string& type) { return type == "done" || type == "error" || type == "cancelled"; }
bool terminal_status(const std::string& s) { return s == "succeeded" || s == "failed" || s == "cancelled"; }

// A finished job's error in the API's shape.
ApiError job_error(const RedisJobStatus& s) {
  if (s.status == "cancelled") return ApiError{409, "job " + s.id + " was cancelled", "invalid_request_error", "", "cancelled"};
  return ApiError{500, "generation failed: " + (s.error.empty() ? std::string("unknown error") : s.error), "server_error",
                  "", "generation_failed"};
}

// The model limits a worker published, for checking requests before they are queued.
ModelLimits limits_of(const json& m) {
  ModelLimits l;
  const json& j = m.at("model_limits");
  l.scale_factor = j.at("scale_factor");
  l.latent_channels = j.at("latent_channels");
  l.turbo = j.at("turbo");
  l.max_side = j.at("max_side");
  l.max_pixels = j.at("max_pixels");
  l.max_steps = j.at("max_steps");
  l.max_images = j.at("max_images");
  l.shift = j.at("shift");
  return l;
}

}  // namespace

SharedServer::SharedServer(std::unique_ptr<Engine> engine, SharedServerOptions opt)
    : opt_(std::move(opt)), engine_(std::move(engine)) {
  const bool works = opt_.role != NodeRole::Api, serves_api = opt_.role != NodeRole::Worker;
  ERNIE_CHECK(!works || engine_, "serve --role ", role_name(opt_.role), " needs a model (--model)");
  RedisQueueOptions api_opt = opt_.queue;
  api_opt.client.retry_for = std::min(api_opt.client.retry_for, milliseconds(5000));  // then 503, not a hung request
  pool_ = std::make_unique<Pool>(opt_.redis, api_opt);
  RedisClientOptions ping;
  ping.connect_timeout = ping.command_timeout = milliseconds(1000);
  health_ = std::make_unique<RedisClient>(opt_.redis, ping);
  RedisQueueOptions streams_opt = opt_.queue;  // the event streams' thread's: no retries, short timeouts
  streams_opt.client.connect_timeout = streams_opt.client.command_timeout = milliseconds(500);
  streams_opt.client.retry_for = milliseconds(0);
  stream_queue_ = std::make_unique<RedisQueue>(opt_.redis, streams_opt);
  if (works) {
    const std::string name = model_display_name(engine_->model_dir());
    model_json_ = engine_json(*engine_, name);
    worker_ = std::make_unique<RedisWorker>(
        opt_.redis, opt_.queue, engine_runner(*engine_, {name, opt_.limits, &abandon_, opt_.log_jobs}));
  }
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || !host[0]) std::snprintf(host, sizeof host, "node");
  node_ = std::string(host) + "-" + std::to_string(getpid());
  opt_.http.guard.api_key = opt_.api_key;  // 401 at head time, before a body is read
  http_ = make_http(opt_.http, metrics_);
  common_routes();
  if (serves_api) api_routes();
  if (serves_api) add_web_page(*http_);  // last: its pattern would take /health and /metrics
  add_fallback_handlers(*http_, metrics_, opt_.http.log_requests);
}

SharedServer::~SharedServer() {
  if (!closing_) shutdown(0);
}

int SharedServer::bind() { return port_ = bind_http(*http_, opt_.http.host, opt_.http.port); }

void SharedServer::run() {
  if (worker_) {
    worker_->start();
    publisher_ = std::thread([this] { publish_loop(); });
  }
  http_->listen_after_bind();
}

void SharedServer::shutdown(double grace_s) {
  if (closing_.exchange(true)) return;
  stopping_ = true;
  if (worker_) {
    worker_->stop();  // takes no new job; the one at hand may finish within the grace period
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
    while (worker_->busy() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(milliseconds(20));
    abandon_ = true;  // still running: it stops at its next step and goes back to the queue
    worker_.reset();  // joins
  }
  {
    std::lock_guard lk(mu_);
    cv_.notify_all();
  }
  if (publisher_.joinable()) publisher_.join();
  for (int i = 0; i < 300 && streams_open_.load() > 0; ++i) std::this_thread::sleep_for(milliseconds(10));
  http_->stop();
  http_->stop_guard();
}

void SharedServer::publish_loop() {
  // Again every few seconds: a Redis that restarted without its data learns the model again.
  RedisQueueOptions o = opt_.queue;
  o.client.retry_for = milliseconds(1000);
  RedisQueue q(opt_.redis, o);
  const std::string text = model_json_.dump(-1, ' ', false, json::error_handler_t::replace);
  std::unique_lock lk(mu_);
  while (!closing_) {
    lk.unlock();
    try {
      q.publish_model(text);
    } catch (const std::exception&) {
      // Redis away: /health says so; try again later
    }
    lk.lock();
    cv_.wait_for(lk, milliseconds(5000), [this] { return closing_.load(); });
  }
}

json SharedServer::published_model() {
  if (!model_json_.is_null()) return model_json_;  // this node's own worker
  std::lock_guard lk(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (cached_model_.is_null() || now - cached_at_ > milliseconds(1000)) {
    auto text = pool_->get()->model();
    json m = text ? json::parse(*text, nullptr, false) : json();
    cached_model_ = m.is_object() && m.contains("model_limits") ? m : json();
    cached_at_ = now;
  }
  return cached_model_;
}

std::string SharedServer::submit(ParsedRequest p) {
  if (stopping_) throw ApiException{shutting_down()};
  p.req.seed_random = !p.seed_given;
  draw_seed(p.req);  // the job records its seed before a worker resolves it
  // Checked against the model's limits when a worker has published them; before that (no worker yet, as
  // when an autoscaler starts workers for queued jobs) the worker checks, and a bad request fails its job.
  const json m = published_model();
  if (!m.is_null()) {
    try {
      p.req = resolve_request(p.req, limits_of(m));  // stored resolved: the job's params show what runs
    } catch (const Error& e) {
      bad_request(e.what(), param_of(e.what()), "invalid_value");
    }
  }
  auto q = pool_->get();
  const RedisQueueDepth d = q->depth();
  if (d.unclaimed >= opt_.max_unclaimed) throw ApiException{queue_full(int(opt_.max_unclaimed))};
  const std::string id = new_job_id();
  q->submit(request_to_json(p).dump(-1, ' ', false, json::error_handler_t::replace), id);
  return id;
}

json SharedServer::describe(const RedisJobStatus& s) const {
  const json params = job_params(json::parse(s.request, nullptr, false));
  json o = {{"id", s.id},           {"object", "image.job"},       {"status", s.status},
            {"created", s.created_ms / 1000}, {"step", s.step}, {"total", s.total},
            {"attempts", s.attempts}, {"params", params}};
  if (!s.owner.empty() && s.status == "running") o["worker"] = s.owner;
  if (s.status == "succeeded") {
    const json info = json::parse(s.info, nullptr, false);
    const int n = params.value("n", 1);
    json data = json::array();
    if (s.has_result)
      for (int i = 0; i < n; ++i) {
        json d = {{"index", i}, {"url", "/v1/files/" + s.id + "-" + std::to_string(i) + ".png"}};
        if (info.is_object() && info.contains("seeds") && i < int(info["seeds"].size())) d["seed"] = info["seeds"][i];
        data.push_back(std::move(d));
      }
    o["images"] = n;
    o["images_available"] = s.has_result ? n : 0;
    o["data"] = std::move(data);
    if (!s.has_result) o["images_gone"] = "expired (results are kept " + std::to_string(opt_.queue.result_ttl.count()) + " s)";
    if (info.is_object()) {
      o["revised_prompt"] = info.value("revised_prompt", "");
      o["truncated"] = info.value("truncated", false);
      if (info.contains("timings")) o["timings"] = info["timings"];
    }
  }
  if (s.status == "failed" || s.status == "cancelled") o["error"] = job_error(s).to_json()["error"];
  return o;
}

RedisJobStatus SharedServer::job(const std::string& id) {
  auto s = pool_->get()->status(id);
  if (!s) throw ApiException{not_found("no job '" + id + "' (unknown, or its record expired)")};
  return *s;
}

std::vector<std::string> SharedServer::images(const RedisJobStatus& st, int index) {
  const std::string& id = st.id;
  auto conflict = [&](const std::string& msg, const std::string& code) {
    throw ApiException{ApiError{409, msg, "invalid_request_error", "", code}};
  };
  if (!terminal_status(st.status)) conflict("job " + id + " is still " + st.status + "; wait for it to finish", "not_ready");
  if (st.status == "failed") conflict("job " + id + " failed: " + st.error, "job_failed");
  if (st.status == "cancelled") conflict("job " + id + " was cancelled", "job_cancelled");
  auto r = pool_->get()->result(id);
  if (!r)
    throw ApiException{ApiError{410, "the images of job " + id + " are gone: expired (results are kept " +
                                         std::to_string(opt_.queue.result_ttl.count()) + " s)",
                                "invalid_request_error", "", "gone"}};
  if (index >= int(r->size()))
    throw ApiException{not_found("job " + id + " has " + std::to_string(r->size()) + " image(s); there is no image " +
                                 std::to_string(index))};
  if (index >= 0) return {(*r)[size_t(index)]};
  return *r;
}

void SharedServer::handle_generations(const httplib::Request& req, httplib::Response& res, const ParsedRequest& p) {
  const bool url = p.url;
  const std::string id = submit(p);
  res.set_header("X-Job-Id", id);
  std::string last = "0";
  for (bool ended = false; !ended;) {
    if (client_gone()) {  // nobody is left to take the images
      pool_->get()->cancel(id);
      return;
    }
    for (const RedisJobEvent& e : pool_->get()->events_since(id, last, milliseconds(1000))) {
      last = e.id;
      ended = ended || terminal_event(e.type);
    }
  }
  const auto s = pool_->get()->status(id);
  if (!s) return send_error(res, not_found("job " + id + " expired while it ran"));
  if (s->status != "succeeded") return send_error(res, job_error(*s));
  const json info = json::parse(s->info, nullptr, false);
  const std::vector<std::string> pngs = images(*s, -1);
  json data = json::array();
  for (size_t i = 0; i < pngs.size(); ++i) {
    json d = {{"revised_prompt", info.value("revised_prompt", "")}};
    if (info.contains("seeds") && i < info["seeds"].size()) d["seed"] = info["seeds"][i];
    if (url) d["url"] = file_url(req, opt_.http.host, port_, id, int(i));
    else d["b64_json"] = base64_encode(encode_output(pngs[i], p.output));
    data.push_back(std::move(d));
  }
  send_json(res, 200,
            {{"created", s->created_ms / 1000}, {"output_format", image_format_name(p.output.format)}, {"data", std::move(data)}, {"id", id}, {"seed", info.value("seed", json())},
             {"size", info.value("size", "")}, {"steps", info.value("steps", 0)},
             {"guidance_scale", info.value("guidance_scale", 0.0)}, {"truncated", info.value("truncated", false)}});
}

namespace {
// A job's events for its stream, read from Redis without blocking on the streams' thread (server/event_streams.h),
// through one connection that only that thread uses. When Redis does not answer, the streams end for a second
// (one timeout, not one per stream): their clients reconnect with Last-Event-ID.
class RedisEvents : public EventSource {
 public:
  RedisEvents(RedisQueue& q, std::string id, std::string after, const std::atomic<bool>& closing,
              std::atomic<int>& open, std::chrono::steady_clock::time_point& redis_away_until)
      : q_(q), id_(std::move(id)), last_(std::move(after)), closing_(closing), open_(open), away_(redis_away_until) {
    ++open_;
  }
  ~RedisEvents() override { --open_; }
  bool poll(std::string& out) override {
    const auto now = std::chrono::steady_clock::now();
    if (now < away_) return false;
    try {
      bool ended = false;
      const auto evs = q_.events_since(id_, last_);
      for (const RedisJobEvent& e : evs) {
        out += sse_event(e.id, e.type, e.data);
        last_ = e.id;
        ended = ended || terminal_event(e.type);
      }
      if (!ended && evs.empty() && ++idle_ % 10 == 0) {  // resumed after the last event, or the record expired
        const auto s = q_.status(id_);
        ended = !s || terminal_status(s->status);
      }
      return !ended && !closing_;
    } catch (const std::exception&) {
      away_ = now + std::chrono::seconds(1);
      return false;
    }
  }

 private:
  RedisQueue& q_;
  std::string id_, last_;
  const std::atomic<bool>& closing_;
  std::atomic<int>& open_;
  std::chrono::steady_clock::time_point& away_;
  int idle_ = 0;
};
}  // namespace

void SharedServer::handle_events(const httplib::Request& req, httplib::Response& res, const std::string& id) {
  job(id);  // 404 before the stream opens
  // Last-Event-ID is a stream entry id ("1733300000000-0") of the job's events, from any node.
  static const std::regex entry_id(R"([0-9]{1,20}-[0-9]{1,20})");
  std::string after = req.get_header_value("Last-Event-ID");
  if (!std::regex_match(after, entry_id)) after = "0";
  http_->open_event_stream(res, std::make_unique<RedisEvents>(*stream_queue_, id, after, closing_, streams_open_,
                                                              redis_away_until_));
}

void SharedServer::api_routes() {
  httplib::Server& s = *http_;
  const size_t limit = opt_.http.max_body_bytes;
  auto route = [](auto fn) { return guarded(redis_guarded(fn)); };
  auto job_route = [this, route](auto fn) {
    return route([this, fn](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req)) return send_error(res, unauthorized());
      fn(req, res, std::string(req.matches[1]));
    });
  };
  auto generations = [this](bool edit) {
    return redis_guarded([this, edit](const httplib::Request& req, httplib::Response& res, const std::string& body) {
      if (!authorized(req)) return send_error(res, unauthorized());
      handle_generations(req, res, parse_generation_request(body, opt_.limits, edit));
    });
  };
  s.Post("/v1/images/generations", with_body(limit, generations(false)));
  auto edits_json = with_body(limit, generations(true));
  s.Post("/v1/images/edits", [this, limit, edits_json, route](const httplib::Request& req, httplib::Response& res,
                                                              const httplib::ContentReader& reader) {
    if (!req.is_multipart_form_data()) return edits_json(req, res, reader);
    std::vector<FormPart> parts;
    if (!read_form(req, reader, limit, parts, res)) return;
    route([&](const httplib::Request& rq, httplib::Response& rs) {
      if (!authorized(rq)) return send_error(rs, unauthorized());
      handle_generations(rq, rs, parse_edit_form(parts, opt_.limits));
    })(req, res);
  });
  s.Post("/v1/jobs", with_body(limit, redis_guarded([this](const httplib::Request& req, httplib::Response& res,
                                                             const std::string& body) {
           if (!authorized(req)) return send_error(res, unauthorized());
           const std::string id = submit(parse_generation_request(body, opt_.limits));
           res.set_header("Location", "/v1/jobs/" + id);
           send_json(res, 202, describe(*pool_->get()->status(id)));
         })));
  s.Get("/v1/jobs", route([this](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req)) return send_error(res, unauthorized());
    const size_t n = list_limit(req);
    auto q = pool_->get();
    json data = json::array();
    for (const std::string& id : q->recent(n))
      if (auto st = q->status(id)) data.push_back(describe(*st));
    send_json(res, 200, {{"object", "list"}, {"data", std::move(data)}});
  }));
  // One image as image/png: GET /v1/files/{id}-{i}.png and GET /v1/jobs/{id}/images/{i}.
  auto png_route = job_route([this](auto& req, auto& res, const std::string& id) {
    auto png = images(job(id), std::stoi(req.matches[2]));
    res.set_header("Cache-Control", "private, max-age=86400, immutable");
    res.set_header("Content-Disposition", "inline; filename=\"" + id + "-" + std::string(req.matches[2]) + ".png\"");
    res.status = 200;
    res.set_content(std::move(png[0]), "image/png");
  });
  s.Get(R"(/v1/files/(job_[A-Za-z0-9]{1,60})-([0-9]{1,4})\.png)", png_route);
  const std::string job_path = R"(/v1/jobs/([A-Za-z0-9_]{1,64}))";
  s.Get(job_path, job_route([this](auto&, auto& res, const std::string& id) {
    send_json(res, 200, describe(job(id)));
  }));
  s.Get(job_path + "/events", job_route([this](auto& req, auto& res, const std::string& id) { handle_events(req, res, id); }));
  s.Delete(job_path, job_route([this](auto&, auto& res, const std::string& id) {
    auto q = pool_->get();
    switch (q->cancel(id)) {
      case RedisQueue::CancelResult::NotFound:
        return send_error(res, not_found("no job '" + id + "' (unknown, or its record expired)"));
      case RedisQueue::CancelResult::AlreadyEnded:
        q->remove(id);
        return send_json(res, 200, {{"id", id}, {"object", "image.job.deleted"}, {"deleted", true}});
      default:
        if (auto st = q->status(id)) return send_json(res, 200, describe(*st));
        return send_error(res, not_found("no job '" + id + "'"));
    }
  }));
  s.Get(job_path + "/images", job_route([this](auto&, auto& res, const std::string& id) {
    const RedisJobStatus st = job(id);
    const json info = json::parse(st.info, nullptr, false);
    const auto pngs = images(st, -1);
    json data = json::array();
    for (size_t i = 0; i < pngs.size(); ++i) {
      json d = {{"index", i}, {"b64_json", base64_encode(pngs[i])}};
      if (info.is_object()) {
        d["revised_prompt"] = info.value("revised_prompt", "");
        if (info.contains("seeds") && i < info["seeds"].size()) d["seed"] = info["seeds"][i];
      }
      data.push_back(std::move(d));
    }
    send_json(res, 200, {{"created", st.created_ms / 1000}, {"id", id}, {"data", std::move(data)}});
  }));
  s.Get(job_path + R"(/images/([0-9]{1,4}))", png_route);
  // The model's description: from this node's worker, or what the workers published.
  auto model_or_503 = [this]() {
    json m = published_model();
    if (m.is_null())
      throw ApiException{ApiError{503, "no worker has published its model yet (start a worker: serve --role worker)",
                                  "server_error", "", "no_worker"}};
    return m;
  };
  s.Get("/v1/models", route([this, model_or_503](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req)) return send_error(res, unauthorized());
    const json m = model_or_503();
    send_json(res, 200, {{"object", "list"}, {"data", {{{"id", m["model"]}, {"object", "model"}, {"owned_by", "ernie-image"}}}}});
  }));
  s.Get("/v1/loras", route([this, model_or_503](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req)) return send_error(res, unauthorized());
    send_json(res, 200, {{"object", "list"}, {"data", model_or_503().value("lora_list", json::array())}});
  }));
  s.Get("/v1/info", route([this, model_or_503](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req)) return send_error(res, unauthorized());
    json m = model_or_503();
    m["loras"] = !m.value("lora_list", json::array()).empty();
    m.erase("lora_list");
    m.erase("model_limits");
    m["limits"] = {{"max_images", opt_.limits.max_images}, {"max_steps", opt_.limits.max_steps},
                   {"max_side", opt_.limits.max_side}, {"max_queue", opt_.max_unclaimed},
                   {"max_body_bytes", opt_.http.max_body_bytes}};
    m["max_batch_images"] = 1;
    m["preview"] = "none";  // previews are not sent through the shared queue
    m["history"] = {{"shared", true}, {"result_ttl_s", opt_.queue.result_ttl.count()}};
    m["queue"] = {{"shared", true}, {"role", role_name(opt_.role)}};
    m["api_key_required"] = !opt_.api_key.empty();
    send_json(res, 200, m);
  }));
}

void SharedServer::common_routes() {
  httplib::Server& s = *http_;
  s.set_pre_routing_handler([this](const httplib::Request&, httplib::Response& res) {
    res.set_header("X-Served-By", node_);
    return httplib::Server::HandlerResponse::Unhandled;
  });
  if (opt_.role == NodeRole::Worker) {  // a worker's port is for probes and scrapes
    auto elsewhere = guarded([](const httplib::Request& req, httplib::Response& res) {
      send_error(res, ApiError{404, "no route " + req.method + " " + req.path +
                                        " on a worker node (--role worker): send API requests to an api node",
                               "invalid_request_error", "", "not_found"});
    });
    s.Get(R"(/v1/.*)", elsewhere);
    s.Post(R"(/v1/.*)", elsewhere);
  }
  s.Get("/health", guarded([this](const httplib::Request&, httplib::Response& res) {
    const bool redis = health_->ping_once();
    json h = {{"role", role_name(opt_.role)}, {"redis", redis ? "up" : "down"}};
    if (!model_json_.is_null()) {  // this node's worker: what it runs on (an api node loads no model)
      h["model"] = model_json_["model"];
      h["device"] = model_json_["device"];
      h["dtype"] = model_json_["dtype"];
    }
    if (worker_) h["worker"] = {{"name", worker_->consumer()}, {"busy", worker_->busy()}};
    const char* status = stopping_ ? "shutting_down" : redis ? "ok" : "redis_down";
    h["status"] = status;
    send_json(res, stopping_ || !redis ? 503 : 200, h);
  }));
  s.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& res) {
    QueueGauges g;
    g.shutting_down = stopping_;
    if (worker_) g.running = worker_->busy() ? 1 : 0;
    std::string out = metrics_.render(g);
    std::optional<RedisQueueDepth> depth;
    if (health_->ping_once()) try {
        depth = pool_->get()->depth();
      } catch (const std::exception&) {
      }
    render_redis_metrics(out, depth, worker_.get());
    res.status = 200;
    res.set_content(out, "text/plain; version=0.0.4");
  }));
}

}  // namespace ernie::server
