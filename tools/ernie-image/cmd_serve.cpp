// ernie-image serve --model DIR [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--max-queue N] [--no-pe]
//   [--max-body-bytes N] [--shutdown-grace S] [--history N] [--history-mib M] [--preview fast|none] [engine flags]
//   [--queue redis://HOST:PORT[/DB] [--role all|api|worker] [--job-lease S] [--max-attempts N]]
// Loads the model once (Engine::open) and serves the HTTP API and web page (src/server/server.h); with --queue,
// the jobs go through a queue shared by many servers over Redis (src/server/shared_server.h), and an api node
// loads no model. SIGTERM or SIGINT: new work gets 503, waiting jobs are cancelled (shared queue: they stay
// queued for other workers), the running one may finish within the grace period, then the process exits 0. A
// second signal exits at once. Memory is planned for one default-size image (engine/memory_plan.h
// serving_shape); the default is everything resident.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <pthread.h>
#include <thread>
#include <unistd.h>

#include "commands.h"
#include "core/error.h"
#include "engine/engine.h"
#include "progress.h"
#include "engine_flags.h"
#include "server/http_common.h"
#include "server/server.h"
#ifdef ERNIE_HAVE_REDIS
#include "server/shared_server.h"
#endif
#include "server/redis_url.h"

namespace ernie::cli {
namespace {

struct Opts {
  EngineOptions engine;
  std::string host = "127.0.0.1", api_key;
  int port = 8080, max_queue = 16;
  int max_streams = 1024, max_streams_per_client = 64;  // event streams (server/event_streams.h)
  size_t max_body = size_t(16) << 20;
  double grace = 30;
  int history = 50;
  double history_mib = 512;
  std::string preview = "fast";
  bool no_pe = false, quiet = false;
  std::string queue, role = "all";  // the shared queue (issue 27)
  double job_lease = 30;
  int max_attempts = 3;
  bool max_queue_given = false;
};

// Serves until the first signal, then shuts down gracefully (a second signal exits at once).
template <class S>
int serve_until_signal(S& srv, const Opts& o, const sigset_t& sigs) {
  const int port = srv.bind();
  std::string host = o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host;
  const bool loopback = o.host == "127.0.0.1" || o.host == "localhost" || o.host == "::1";
  if (!loopback && o.api_key.empty())
    std::fprintf(stderr, "warning: listening on %s without --api-key: anyone who can reach this port can use it\n",
                 o.host.c_str());
  std::printf("ernie-image serve: listening on http://%s:%d/\n", host.c_str(), port);
  std::fflush(stdout);

  std::thread http([&] { srv.run(); });
  int sig = 0;
  sigwait(&sigs, &sig);
  std::fprintf(stderr, "ernie-image serve: %s, shutting down (grace %.0f s; signal again to exit now)\n",
               sig == SIGTERM ? "SIGTERM" : "SIGINT", o.grace);
  std::thread force([sigs] {
    int again = 0;
    sigwait(&sigs, &again);
    std::fprintf(stderr, "ernie-image serve: second signal, exiting now\n");
    std::_Exit(130);
  });
  force.detach();
  srv.shutdown(o.grace);
  http.join();
  std::fprintf(stderr, "ernie-image serve: stopped\n");
  return 0;
}

int run(Opts& o) {
  ERNIE_CHECK(o.port >= 0 && o.port <= 65535, "--port ", std::to_string(o.port), " is not a TCP port");
  ERNIE_CHECK(o.max_queue >= 1, "--max-queue ", std::to_string(o.max_queue), " must be at least 1");
  ERNIE_CHECK(o.max_body >= 1024, "--max-body-bytes must be at least 1024");
  ERNIE_CHECK(o.grace >= 0, "--shutdown-grace must not be negative");
  ERNIE_CHECK(o.history >= 1, "--history ", std::to_string(o.history), " must be at least 1");
  ERNIE_CHECK(o.history_mib > 0 && o.history_mib <= 1 << 20, "--history-mib must be a positive number of MiB");
  o.engine.pe = o.no_pe ? PeLoad::Off : PeLoad::IfPresent;
  if (!o.queue.empty()) {
    std::string why;
    ERNIE_CHECK(server::parse_redis_url(o.queue, &why).has_value(), "--queue: ", why);
    ERNIE_CHECK(o.job_lease >= 1 && o.job_lease <= 86400, "--job-lease must be from 1 to 86400 seconds");
    ERNIE_CHECK(o.max_attempts >= 1 && o.max_attempts <= 100, "--max-attempts must be from 1 to 100");
  } else {
    ERNIE_CHECK(o.role == "all", "--role ", o.role, " needs --queue redis://HOST:PORT (the shared job queue)");
  }

  // Signals are taken by one thread with sigwait: block them before any other thread exists.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  std::unique_ptr<Engine> engine;
  if (o.queue.empty() || o.role != "api") {  // an api node of the shared queue loads no model
    ProgressPrinter printer(o.quiet ? ProgressMode::Quiet : ProgressMode::Auto);  // plain lines in a log
    engine = Engine::open(o.engine, printer.fn());
    printer.finish();
    const EngineInfo& info = engine->info();
    std::fprintf(stderr, "loaded %s on %s (offload %s)\n", engine->model_dir().c_str(), info.device.str().c_str(),
                 offload_name(info.memory.mode));
    if (info.memory.limit_bytes)
      std::fprintf(stderr, "--max-vram %s: --offload %s%s (estimated peak %s for one default-size image)\n",
                   gib_str(info.memory.limit_bytes).c_str(), offload_name(info.memory.mode),
                   info.memory.vae_tiling ? " with a tiled VAE decode" : "", gib_str(info.memory.estimate_bytes).c_str());
  }
  server::StreamLimits streams;
  streams.max_streams = o.max_streams;
  streams.max_per_client = o.max_streams_per_client;
  const server::HttpOptions http{o.host, o.port, o.max_body, std::max(32, o.max_queue + 16), {}, !o.quiet, streams};

  if (!o.queue.empty()) {
#ifdef ERNIE_HAVE_REDIS
    server::SharedServerOptions so;
    so.http = http;
    so.http.http_threads = 64;  // requests wait on Redis, and nothing here is memory-bound
    so.api_key = o.api_key;
    so.redis = *server::parse_redis_url(o.queue);
    so.role = server::parse_node_role(o.role);
    so.queue.lease = std::chrono::milliseconds(int64_t(o.job_lease * 1000));
    so.queue.max_attempts = o.max_attempts;
    if (o.max_queue_given) so.max_unclaimed = o.max_queue;
    so.log_jobs = !o.quiet;
    server::SharedServer srv(std::move(engine), so);
    std::fprintf(stderr, "shared queue %s, role %s, job lease %.0f s, at most %d attempts\n",
                 server::format_redis_url(so.redis).c_str(), o.role.c_str(), o.job_lease, o.max_attempts);
    return serve_until_signal(srv, o, sigs);
#else
    throw Error("--queue: this build has no Redis support (build with -DERNIE_REDIS=ON and libhiredis-dev)");
#endif
  }

  server::ServerOptions so;
  so.host = http.host;
  so.port = http.port;
  so.api_key = o.api_key;
  so.max_body_bytes = http.max_body_bytes;
  so.queue.max_queue = o.max_queue;
  so.queue.history = o.history;
  so.queue.history_bytes = size_t(o.history_mib * double(1 << 20));
  so.queue.preview = o.preview == "fast";
  so.queue.log_jobs = !o.quiet;
  so.http_threads = http.http_threads;
  so.log_requests = http.log_requests;
  so.streams = http.streams;
  server::Server srv(std::move(engine), so);
  return serve_until_signal(srv, o, sigs);
}

Register reg(30, [](CLI::App& app) {
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("serve", "Serve an HTTP API (OpenAI Images compatible, jobs with live progress) and a web page");
  add_model_flag(*c, o->engine);
  c->add_option("--host", o->host, "address to listen on (default 127.0.0.1: this machine only)");
  c->add_option("--port", o->port, "TCP port (default 8080; 0 picks a free one)");
  c->add_option("--api-key", o->api_key, "require 'Authorization: Bearer KEY' on /v1 routes");
  c->add_option("--max-queue", o->max_queue, "waiting requests before 429 (default 16; with --queue: jobs no worker has "
                "taken yet, default 1000)");
  c->add_option("--max-body-bytes", o->max_body, "largest request body before 413 (default 16 MiB: room for an img2img PNG)");
  c->add_option("--max-streams", o->max_streams, "open event streams (GET /v1/jobs/{id}/events) in all before 503 "
                "(default 1024)")->check(CLI::PositiveNumber);
  c->add_option("--max-streams-per-client", o->max_streams_per_client, "open event streams per client address before "
                "503 (default 64)")->check(CLI::PositiveNumber);
  c->add_option("--lora-dir,--lora-model-dir", o->engine.lora_dir,
                "folder of LoRA .safetensors files requests may name (\"loras\": [{\"name\", \"scale\"}] or prompt "
                "tags <lora:NAME:SCALE>); GET /v1/loras lists them");
  c->add_option("--shutdown-grace", o->grace, "seconds a running job may take to finish on SIGTERM (default 30)");
  c->add_option("--history", o->history, "finished jobs whose images the server keeps for the page's gallery and for "
                "repeated fetches (default 50; the oldest are evicted)");
  c->add_option("--history-mib", o->history_mib, "at most this many MiB of PNGs in the history (default 512; the newest "
                "job is always kept)");
  c->add_option("--preview", o->preview, "live previews in the job events while someone watches: fast (a latent-to-RGB "
                "projection per step, the default) or none")
      ->check(CLI::IsMember({"fast", "none"}));
  o->engine.default_offload = Offload::None;
  add_engine_flags(*c, o->engine, "a server keeps every component resident, so no request waits for the text encoder "
                   "to load; --max-vram plans for one default-size image and then runs requests one at a time (no batching)");
  c->add_option("--queue", o->queue, "share one job queue among many servers through Redis: redis://HOST[:PORT][/DB] "
                "(docs/scale-out.md); without it this server keeps its own queue");
  c->add_option("--role", o->role, "with --queue: all (take requests and run jobs, the default), api (take requests, "
                "load no model) or worker (run jobs; its port answers /health and /metrics)")
      ->check(CLI::IsMember({"all", "api", "worker"}));
  c->add_option("--job-lease", o->job_lease, "with --queue: seconds after which a job whose worker stopped renewing "
                "its lease is taken over by another worker (default 30)");
  c->add_option("--max-attempts", o->max_attempts, "with --queue: runs of a job (first run, retries, takeovers) before "
                "it fails with its last error (default 3)");
  c->add_flag("--no-pe", o->no_pe, "do not load the prompt enhancer (requests with use_pe then fail)");
  c->add_flag("--quiet,-q", o->quiet, "no loading bar, no request log");
  return std::function<int()>([o, c] {
    o->max_queue_given = c->count("--max-queue") > 0;
    return run(*o);
  });
});

}  // namespace
}  // namespace ernie::cli
