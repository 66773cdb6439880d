// What both servers share (the single-process one of server.h and the shared-queue one of shared_server.h):
// JSON and error replies, bodies read under a limit, the bearer-key check, route wrappers that turn
// exceptions into OpenAI-shaped errors, the listener's set-up and bind, the web page, and the handlers
// for what no route answers.
#pragma once
#include <httplib.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/api_error.h"
#include "server/form_data.h"
#include "server/guarded_http.h"
#include "server/metrics.h"

namespace ernie::server {

void send_json(httplib::Response& res, int status, const nlohmann::json& j);
void send_error(httplib::Response& res, const ApiError& e);
// Which request field an Engine::resolve message is about, for the error's `param`.
std::string param_of(const std::string& msg);
// How the engine was loaded (serve --offload / --max-vram / --vae-tiling), for /health and /v1/info.
nlohmann::json memory_json(const EngineInfo& e);
std::string size_str(int w, int h);  // "1024x768"
// The absolute URL of /v1/files/{job_id}-{index}.png, from the request's Host (what the client reached us by);
// a missing or malformed Host falls back to the bound host:port.
std::string file_url(const httplib::Request& req, const std::string& bound_host, int port, const std::string& job_id,
                     int index);

// GET /v1/jobs's ?limit=N: 1 to 1000, 100 when absent; anything else is a 400 naming `limit`.
size_t list_limit(const httplib::Request& req);

// `Authorization: Bearer KEY` (scheme case-insensitive, key compared in constant time); true without a key.
bool bearer_ok(const httplib::Request& req, const std::string& api_key);

// Reads a POST body with a hard limit on what is kept (chunked bodies too); false after sending 413 or 400.
bool read_body(const httplib::Request& req, const httplib::ContentReader& reader, size_t limit, std::string& body,
               httplib::Response& res);
// A multipart/form-data body's parts; false after sending the error.
bool read_form(const httplib::Request& req, const httplib::ContentReader& reader, size_t limit,
               std::vector<FormPart>& parts, httplib::Response& res);

// Wraps a handler: ApiException -> its error; anything else -> 500 with the message.
template <class F>
httplib::Server::Handler guarded(F fn) {
  return [fn](const httplib::Request& req, httplib::Response& res) {
    try {
      fn(req, res);
    } catch (const ApiException& e) {
      send_error(res, e.error);
    } catch (const std::exception& e) {
      send_error(res, ApiError{500, std::string("internal error: ") + e.what(), "server_error", "", "internal_error"});
    }
  };
}
// The same for a POST handler that takes the body, read under `limit`: fn(req, res, body).
template <class F>
httplib::Server::HandlerWithContentReader with_body(size_t limit, F fn) {
  return [limit, fn](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
    std::string body;
    if (!read_body(req, reader, limit, body, res)) return;
    guarded([&](const httplib::Request& rq, httplib::Response& rs) { fn(rq, rs, body); })(req, res);
  };
}

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                     // 0: any free port (tests)
  size_t max_body_bytes = size_t(16) << 20;
  int http_threads = 32;
  GuardOptions guard;
  bool log_requests = true;
  StreamLimits streams;  // event streams (server/event_streams.h)
};
// The listener behind the connection guard, with the body limit and timeouts; rejected connections are
// counted in `metrics`.
std::unique_ptr<GuardedHttp> make_http(const HttpOptions& o, Metrics& metrics);
// Binds; returns the port. A busy port is an error naming the reason (never a second listener sharing it).
int bind_http(GuardedHttp& http, const std::string& host, int port);
// GET / and the page's files (server/web_assets.h).
void add_web_page(httplib::Server& s);
// OpenAI-shaped bodies for what httplib answers itself (no route, unreadable request), 500 for an escaped
// exception, and after every request: the request counter and (with `log`) one line on stderr.
void add_fallback_handlers(httplib::Server& s, Metrics& metrics, bool log);

}  // namespace ernie::server
