#include "server/http_common.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "core/error.h"
#include "server/http_head.h"
#include "server/web_assets.h"

namespace ernie::server {
using nlohmann::json;


void send_json(httplib::Response& res, int status, const json& j) {
  res.status = status;
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}
void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status, e.to_json()); }

std::string param_of(const std::string& msg) {
  static const std::pair<const char*, const char*> prefixes[] = {
      {"width", "size"}, {"height", "size"}, {"size", "size"}, {"steps", "steps"},
      {"cfg", "guidance_scale"}, {"number of images", "n"}, {"prompt", "prompt"}, {"LoRA", "loras"},
      {"negative prompt", "negative_prompt"}};
  for (auto& [p, field] : prefixes)
    if (msg.rfind(p, 0) == 0) return field;
  return "";
}

namespace {
double gib(size_t bytes) { return double(bytes) / double(size_t(1) << 30); }

}  // namespace

json memory_json(const EngineInfo& e) {
  const OffloadChoice& m = e.memory;
  return {{"offload", offload_name(m.mode)}, {"vae_tiling", e.vae_tiling_forced ? "on" : "auto"},
          {"max_vram_gib", m.limit_bytes ? json(gib(m.limit_bytes)) : json(nullptr)},
          {"estimated_peak_gib", m.estimate_bytes ? json(gib(m.estimate_bytes)) : json(nullptr)}};
}


// Reads a POST body with a hard limit on what is kept (chunked bodies included; httplib limits only
// Content-Length). The rest of an oversized body is read and dropped, as httplib does, so the
// connection stays in step. Returns false after filling `res` with 413 or 400.
bool read_body(const httplib::Request& req, const httplib::ContentReader& reader, size_t limit, std::string& body,
               httplib::Response& res) {
  const bool chunked = req.get_header_value("Transfer-Encoding").find("chunked") != std::string::npos;
  if (!chunked && !req.has_header("Content-Length")) return true;  // no body
  bool over = false;
  bool ok = reader([&](const char* d, size_t n) {
    if (over || body.size() + n > limit) {
      if (!over) std::string().swap(body);
      over = true;
      return true;
    }
    body.append(d, n);
    return true;
  });
  if (over || (!ok && res.status == 413)) {
    send_error(res, too_large(limit));
    return false;
  }
  if (!ok) {
    send_error(res, ApiError{400, "could not read the request body", "invalid_request_error", "", "bad_body"});
    return false;
  }
  return true;
}

// A multipart/form-data body's parts (server/form_data.h parse_multipart); false after sending the error.
bool read_form(const httplib::Request& req, const httplib::ContentReader& reader, size_t limit,
               std::vector<FormPart>& parts, httplib::Response& res) {
  // The guard has read the body whole: httplib's reader would run its own multipart parser, without our limits.
  std::string read;
  const std::string_view* guarded = request_body();
  if (!guarded && !read_body(req, reader, limit, read, res)) return false;
  const std::string_view body = guarded ? *guarded : std::string_view(read);
  if (body.size() > limit) {
    send_error(res, too_large(limit));
    return false;
  }
  try {
    parts = parse_multipart(req.get_header_value("Content-Type"), body);
  } catch (const ApiException& e) {
    send_error(res, e.error);
    return false;
  }
  return true;
}

std::string size_str(int w, int h) { return std::to_string(w) + "x" + std::to_string(h); }

std::string file_url(const httplib::Request& req, const std::string& bound_host, int port, const std::string& job_id,
                     int index) {
  std::string host = req.get_header_value("Host");
  if (host.empty() || host.find_first_of(" /\\\"<>") != std::string::npos)
    host = (bound_host.find(':') != std::string::npos ? "[" + bound_host + "]" : bound_host) + ":" + std::to_string(port);
  return "http://" + host + "/v1/files/" + job_id + "-" + std::to_string(index) + ".png";
}


namespace {
// Why `host:port` cannot be bound: cpp-httplib only says that it failed, so a plain socket tries the same bind
// (SO_REUSEADDR, as the server's) and its errno names the reason.
std::string bind_failure(const std::string& host, int port) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res)
    return host + " is not an address of this machine";
  int err = 0;
  const int fd = ::socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  if (fd < 0) {
    err = errno;
  } else {
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, res->ai_addr, res->ai_addrlen) != 0) err = errno;
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (err == EADDRINUSE) return "port " + std::to_string(port) + " is in use (another server is listening there)";
  if (err == EADDRNOTAVAIL) return host + " is not an address of this machine";
  if (err == EACCES) return "port " + std::to_string(port) + " needs privileges (use a port above 1023)";
  return err ? std::string(std::strerror(err)) : "in use, or not an address of this machine?";
}
}  // namespace

size_t list_limit(const httplib::Request& req) {
  if (!req.has_param("limit")) return 100;
  const std::string v = req.get_param_value("limit");
  if (v.empty() || v.size() > 4 || v.find_first_not_of("0123456789") != std::string::npos || std::stoi(v) < 1 ||
      std::stoi(v) > 1000)
    bad_request("limit must be an integer from 1 to 1000", "limit");
  return size_t(std::stoi(v));
}

bool bearer_ok(const httplib::Request& req, const std::string& api_key) {
  return bearer_matches(int(req.get_header_value_count("Authorization")), req.get_header_value("Authorization"),
                        api_key);
}

std::unique_ptr<GuardedHttp> make_http(const HttpOptions& o, Metrics& metrics) {
  GuardOptions g = o.guard;
  g.head.max_body_bytes = o.max_body_bytes;
  g.on_reject = [&metrics](int status) { metrics.count_request(status); };
  auto http = std::make_unique<GuardedHttp>(g, o.streams, std::max(4, o.http_threads), 15.0);
  http->set_payload_max_length(o.max_body_bytes);
  http->set_keep_alive_timeout(2);
  http->set_read_timeout(15, 0);
  http->set_write_timeout(15, 0);
  return http;
}

int bind_http(GuardedHttp& http, const std::string& host, int port) {
  if (port == 0) {
    const int p = http.bind_to_any_port(host);
    ERNIE_CHECK(p > 0, "serve: cannot listen on ", host, " (any port)");
    return p;
  }
  // A busy port is an error, never a second listener sharing it (GuardedHttp sets no SO_REUSEPORT).
  ERNIE_CHECK(http.bind_to_port(host, port), "serve: cannot listen on ", host, ":", std::to_string(port), ": ",
              bind_failure(host, port));
  return port;
}

void add_web_page(httplib::Server& s) {
  s.Get(R"(/|/[A-Za-z0-9_.-]{1,64})", guarded([](const httplib::Request& req, httplib::Response& res) {
    const WebAsset* a = find_web_asset(req.path);
    if (!a) return send_error(res, not_found("no page " + req.path));
    res.status = 200;
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("Content-Security-Policy",
                   "default-src 'self'; img-src 'self' blob: data:; style-src 'self'; script-src 'self'");
    res.set_content(reinterpret_cast<const char*>(a->data), a->size, a->mime);
  }));
}

void add_fallback_handlers(httplib::Server& s, Metrics& metrics, bool log) {
  s.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e{res.status, "", "invalid_request_error", "", ""};
    if (res.status == 404) {
      e.message = "no route " + req.method + " " + req.path;
      e.code = "not_found";
    } else if (res.status == 413) {
      e.message = "request body is too large";
      e.code = "request_too_large";
    } else {
      e.message = "the server could not handle this request (HTTP " + std::to_string(res.status) + ")";
    }
    res.set_content(e.to_json().dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    send_error(res, ApiError{500, "internal error", "server_error", "", "internal_error"});
  });
  s.set_post_routing_handler([&metrics, log](const httplib::Request& req, httplib::Response& res) {
    metrics.count_request(res.status);
    if (!log) return;
    std::time_t t = std::time(nullptr);
    char ts[32];
    std::tm tm{};
    localtime_r(&t, &tm);
    std::strftime(ts, sizeof ts, "%H:%M:%S", &tm);
    std::fprintf(stderr, "%s %s %s %d\n", ts, req.method.c_str(), req.path.c_str(), res.status);
  });
}

}  // namespace ernie::server
