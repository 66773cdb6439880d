// ernie-image serve --model DIR [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--max-queue N]
//   [--device auto|cpu|cuda[:i]] [--dtype f32|bf16] [--quantize fp8|int8] [--threads N] [--no-pe] [--max-body-bytes N]
//   [--shutdown-grace S] [--vae-tiling] [--vae-tile PIXELS] [--offload none|text-encoder|blocks | --max-vram GiB]
// Loads the model once and serves the HTTP API and web page (src/server/server.h). SIGTERM or SIGINT:
// new work gets 503, waiting jobs are cancelled, the running one may finish within the grace period,
// then the process exits 0. A second signal exits at once. The low-VRAM mode is chosen as generate chooses
// it (pipeline/offload_plan.h), for the request the server plans for (serving_shape); the default is
// everything resident.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <pthread.h>
#include <thread>
#include <unistd.h>

#include "commands.h"
#include "io/model_folder.h"
#include "core/error.h"
#include "core/system_info.h"
#include "generate_util.h"
#include "pipeline/offload_plan.h"
#include "pipeline/pipeline.h"
#include "pipeline/progress.h"
#include "server/server.h"

namespace ernie::cli {
namespace {

struct Opts {
  std::string model, host = "127.0.0.1", api_key, device = "auto", dtype, offload, quantize, attention;
  int port = 8080, max_queue = 16, threads = 0, vae_tile = 0;
  size_t max_body = 1 << 20;
  double grace = 30, max_vram = 0;
  bool no_pe = false, quiet = false, vae_tiling = false;
};

Device pick_device(const std::string& s) {
  if (s != "auto") return Device::parse(s);
  SystemInfo si = query_system_info();
  return si.cuda_built && !si.gpus.empty() ? Device::parse("cuda") : kCPU;
}

int run(const Opts& o, const CLI::App& c) {
  ERNIE_CHECK(o.port >= 0 && o.port <= 65535, "--port ", std::to_string(o.port), " is not a TCP port");
  ERNIE_CHECK(o.max_queue >= 1, "--max-queue ", std::to_string(o.max_queue), " must be at least 1");
  ERNIE_CHECK(o.threads >= 0, "--threads ", std::to_string(o.threads), " must not be negative");
  ERNIE_CHECK(o.max_body >= 1024, "--max-body-bytes must be at least 1024");
  ERNIE_CHECK(o.grace >= 0, "--shutdown-grace must not be negative");
  PipelineOptions popt;
  popt.model_dir = o.model;
  popt.device = pick_device(o.device);
  popt.dtype = parse_dtype_option(o.dtype, popt.device);
  popt.quantize = parse_quantize_option(o.quantize);
  popt.attention_fp8 = parse_attention_option(o.attention);
  popt.threads = o.threads;
  MemoryFlags mem;
  if (c.count("--offload")) mem.offload = o.offload;
  if (c.count("--max-vram")) mem.max_vram_gib = o.max_vram;
  check_memory_flags(mem, popt.device);

  // Signals are taken by one thread with sigwait: block them before any other thread exists.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  const ModelFolder folder = ModelFolder::open(o.model, true);  // a folder or a converted file
  popt.load_pe = !o.no_pe && folder.pe_c.has_value();
  if (o.vae_tiling) popt.vae_tiling = VaeTilingMode::On;
  popt.vae_tile = o.vae_tile;
  // Low-VRAM mode: everything resident unless --offload or --max-vram says otherwise.
  const OffloadChoice oc = plan_pipeline_memory(folder, serving_shape(folder, popt), mem, Offload::None, popt);

  std::fprintf(stderr, "loading %s on %s (offload %s)\n", o.model.c_str(), popt.device.str().c_str(),
               offload_name(oc.mode));
  if (oc.limit_bytes)
    std::fprintf(stderr, "--max-vram %s: --offload %s%s (estimated peak %s for one default-size image)\n",
                 gib_str(oc.limit_bytes).c_str(), offload_name(oc.mode),
                 oc.vae_tiling ? " with a tiled VAE decode" : "", gib_str(oc.estimate_bytes).c_str());
  ProgressPrinter printer(o.quiet ? ProgressMode::Quiet : ProgressMode::Bar);
  std::unique_ptr<Pipeline> pipe = Pipeline::load(popt, printer.fn());
  printer.finish();

  server::ServerOptions so;
  so.host = o.host;
  so.port = o.port;
  so.api_key = o.api_key;
  so.max_body_bytes = o.max_body;
  so.queue.max_queue = o.max_queue;
  so.http_threads = std::max(32, o.max_queue + 16);
  so.log_requests = !o.quiet;
  so.memory = {offload_name(oc.mode), popt.vae_tiling == VaeTilingMode::On ? "on" : "auto", oc.limit_bytes,
               oc.estimate_bytes};
  so.queue.batching = oc.limit_bytes == 0;  // under a cap, the plan covers one request at a time
  server::Server srv(std::move(pipe), so);
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

Register reg(30, [](CLI::App& app) {
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("serve", "Serve an HTTP API (OpenAI Images compatible, jobs with live progress) and a web page");
  c->add_option("--model,-m", o->model, "model folder (diffusers layout)")->required();
  c->add_option("--host", o->host, "address to listen on (default 127.0.0.1: this machine only)");
  c->add_option("--port", o->port, "TCP port (default 8080; 0 picks a free one)");
  c->add_option("--api-key", o->api_key, "require 'Authorization: Bearer KEY' on /v1 routes");
  c->add_option("--max-queue", o->max_queue, "waiting requests before 429 (default 16)");
  c->add_option("--max-body-bytes", o->max_body, "largest request body before 413 (default 1 MiB)");
  c->add_option("--shutdown-grace", o->grace, "seconds a running job may take to finish on SIGTERM (default 30)");
  c->add_option("--device", o->device, "auto (default: CUDA when present), cpu, cuda or cuda:N");
  c->add_option("--dtype", o->dtype, "activation type: f32 (CPU) or bf16 (CUDA default)");
  c->add_option("--quantize", o->quantize, "quantize the DiT's and the text encoder's weights at load: fp8 or int8 (as generate)");
  c->add_option("--attention", o->attention, "bf16 (default) or fp8 attention in the fp8 DiT blocks (as generate)");
  c->add_option("--threads", o->threads, "CPU threads (default: all cores)");
  c->add_flag("--vae-tiling", o->vae_tiling, "decode every image in tiles (less memory; on CUDA it is automatic "
              "when the whole decode would not fit)");
  c->add_option("--vae-tile", o->vae_tile, "tile side in pixels when tiling, a multiple of the VAE's 8 (default: 512 "
                "or less to fit)");
  c->add_option("--offload", o->offload,
                "low-VRAM mode: none (default: every component loaded at start and resident), text-encoder (the "
                "prompt enhancer and text encoder are loaded for each request and freed after it, and the DiT loads "
                "with the first request: never the text encoder and the DiT at once, at the cost of reloading the "
                "text encoder every request), blocks (that, and the DiT blocks stream from pinned host memory each "
                "step; CUDA only)");
  c->add_option("--max-vram", o->max_vram,
                "GiB of device memory to stay under: picks the least offloading (and VAE tiling) whose estimated "
                "peak fits one image at the model's default size and guidance with the longest prompt, caps the "
                "allocator there, and runs requests one at a time (no batching); larger requests may fail with "
                "out_of_memory (CUDA only)");
  c->add_flag("--no-pe", o->no_pe, "do not load the prompt enhancer (requests with use_pe then fail)");
  c->add_flag("--quiet,-q", o->quiet, "no loading bar, no request log");
  return std::function<int()>([o, c] { return run(*o, *c); });
});

}  // namespace
}  // namespace ernie::cli
