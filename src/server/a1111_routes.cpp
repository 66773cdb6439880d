#include "server/a1111_routes.h"

#include <httplib.h>

#include "core/error.h"
#include "server/a1111.h"
#include "server/guarded_http.h"
#include "server/http_common.h"
#include "server/job_queue.h"

namespace ernie::server {
namespace {
using nlohmann::json;

void send_a1111_error(httplib::Response& res, const ApiError& e) {
  if (e.status == 401) res.set_header("WWW-Authenticate", "Basic realm=\"sdapi\"");
  send_json(res, e.status, a1111::error_json(e));
}

// The running jobs (more than one when the queue batched requests together).
std::vector<JobPtr> running_jobs(JobQueue& q) {
  std::vector<JobPtr> out;
  for (const JobPtr& j : q.list(1000))
    if (q.describe(*j).value("status", "") == "running") out.push_back(j);
  return out;
}

}  // namespace

void register_a1111_routes(httplib::Server& s, const A1111Context& c) {
  auto ctx = std::make_shared<A1111Context>(c);
  // Every route: the key (Bearer or Basic), then ApiException -> A1111's error shape.
  auto route = [ctx](auto fn) {
    return [ctx, fn](const httplib::Request& req, httplib::Response& res) {
      try {
        if (!a1111::authorized(int(req.get_header_value_count("Authorization")), req.get_header_value("Authorization"),
                               ctx->api_key))
          return send_a1111_error(res, ApiError{401, "Not authenticated", "invalid_request_error", "", "unauthorized"});
        fn(req, res);
      } catch (const ApiException& e) {
        send_a1111_error(res, e.error);
      } catch (const std::exception& e) {
        send_a1111_error(res, ApiError{500, std::string("internal error: ") + e.what(), "server_error", "", "internal_error"});
      }
    };
  };
  auto post = [ctx, route](auto fn) {
    return [ctx, route, fn](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
      std::string body;
      if (!read_body(req, reader, ctx->max_body_bytes, body, res)) return;
      route([&](const httplib::Request& rq, httplib::Response& rs) { fn(rq, rs, body); })(req, res);
    };
  };
  auto generate = [ctx](bool img2img) {
    return [ctx, img2img](const httplib::Request&, httplib::Response& res, const std::string& body) {
      JobQueue& q = ctx->queue;
      if (q.stopping()) throw ApiException{shutting_down()};
      a1111::Request a = a1111::parse_request(body, img2img, ctx->limits);
      a.parsed.req.seed_random = !a.parsed.seed_given;
      GenerateRequest resolved;
      try {
        resolved = q.pipeline().resolve(a.parsed.req);
      } catch (const Error& e) {  // the model's own checks (a size not a multiple of 16, ...)
        const std::string msg = e.what();
        std::string f = msg.rfind("height", 0) == 0 ? "height" : param_of(msg);
        if (f == "size") f = "width";
        if (f == "guidance_scale") f = "cfg_scale";
        if (f == "n") f = "batch_size";
        throw ApiException{ApiError{422, e.what(), "invalid_request_error", f, "value_error"}};
      }
      JobPtr job = q.submit(resolved);
      res.set_header("X-Job-Id", job->id);
      while (!q.wait_finished(job, std::chrono::milliseconds(200)))
        if (client_gone()) {
          q.cancel(job, ApiError{499, "the client closed the connection", "invalid_request_error", "", "client_closed"});
          q.wait_finished(job);
          q.remove(job);
          return;
        }
      if (job->state != JobState::Succeeded) {
        ApiError e = job->error.value_or(ApiError{500, "job ended without a result", "server_error", "", "internal_error"});
        q.remove(job);
        throw ApiException{e};
      }
      std::vector<std::string> pngs;
      for (auto& [i, png] : q.images(job, -1)) pngs.push_back(std::move(png));
      send_json(res, 200, a1111::response(a, job->req, pngs, ctx->model_name, job->created_unix));
    };
  };
  auto cancel_running = [ctx](const char* why) {
    return [ctx, why](const httplib::Request&, httplib::Response& res, const std::string&) {
      for (const JobPtr& j : running_jobs(ctx->queue))
        ctx->queue.cancel(j, ApiError{409, std::string("interrupted by POST /sdapi/v1/") + why, "invalid_request_error",
                                      "", "interrupted"});
      send_json(res, 200, json::object());
    };
  };
  auto list = [route](json (*make)()) {
    return route([make](const httplib::Request&, httplib::Response& res) { send_json(res, 200, make()); });
  };

  const std::string p = "/sdapi/v1/";
  s.Get(p + "sd-models", route([ctx](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, a1111::sd_models(ctx->model_name, ctx->queue.pipeline().model_dir()));
  }));
  s.Get(p + "samplers", list(&a1111::samplers));
  s.Get(p + "schedulers", list(&a1111::schedulers));
  s.Get(p + "upscalers", list(&a1111::upscalers));
  s.Get(p + "latent-upscale-modes", list(&a1111::latent_upscale_modes));
  s.Get(p + "sd-vae", list(&a1111::sd_vae));
  s.Get(p + "loras", route([ctx](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, a1111::loras(ctx->queue.pipeline().available_loras(), ""));
  }));
  s.Get(p + "options", route([ctx](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, a1111::options(ctx->model_name));
  }));
  s.Post(p + "options", post([ctx](const httplib::Request&, httplib::Response& res, const std::string& body) {
    a1111::check_options(body, ctx->model_name);
    send_json(res, 200, nullptr);
  }));
  s.Get(p + "progress", route([ctx](const httplib::Request&, httplib::Response& res) {
    JobQueue& q = ctx->queue;
    const std::vector<JobPtr> running = running_jobs(q);
    const QueueGauges g = q.gauges();
    send_json(res, 200, a1111::progress(running.empty() ? json(nullptr) : q.describe(*running[0]), g.queued + g.running));
  }));
  s.Post(p + "txt2img", post(generate(false)));
  s.Post(p + "img2img", post(generate(true)));
  s.Post(p + "interrupt", post(cancel_running("interrupt")));
  s.Post(p + "skip", post(cancel_running("skip")));
  s.Post(p + "png-info", post([ctx](const httplib::Request&, httplib::Response& res, const std::string& body) {
    send_json(res, 200, a1111::png_info(body, ctx->limits));
  }));
  // SillyTavern's sdcpp source probes the image routes with OPTIONS (CORS preflights carry no key).
  for (const char* r : {"txt2img", "img2img", "png-info", "options"})
    s.Options(p + r, [](const httplib::Request&, httplib::Response& res) {
      res.status = 204;
      res.set_header("Allow", "OPTIONS, POST");
      res.set_header("Access-Control-Allow-Methods", "OPTIONS, POST");
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
    });
}

}  // namespace ernie::server
