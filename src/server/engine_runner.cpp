#include "server/engine_runner.h"

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/metadata.h"
#include "engine/noise.h"
#include "io/png.h"
#include "server/http_common.h"

namespace ernie::server {

namespace {

// What the api nodes show of a finished job: its status's revised_prompt, truncated, per-image seeds, timings.
nlohmann::json describe_result(const GenerateResult& r) {
  const GenerateRequest& q = r.resolved;
  nlohmann::json seeds = nlohmann::json::array();
  for (int i = 0; i < int(r.images.size()); ++i) seeds.push_back(image_seed(q.seed, i, q.rng));
  return {{"revised_prompt", r.revised_prompt},
          {"truncated", r.prompt_truncated},
          {"seed", q.seed},
          {"seeds", std::move(seeds)},
          {"size", size_str(q.width, q.height)},
          {"steps", q.steps},
          {"guidance_scale", q.cfg},
          {"timings",
           {{"encode_s", r.encode_s}, {"denoise_s", r.denoise_s}, {"decode_s", r.decode_s},
            {"lora_switch_s", r.lora_switch_s}}}};
}

}  // namespace

RedisWorker::Runner engine_runner(Engine& engine, EngineRunnerOptions opt) {
  return [&engine, opt](const RedisClaim& c, const RedisWorker::Progress& progress) -> RedisResult {
    GenerateRequest req;
    try {
      req = engine.resolve(parse_generation_request(c.request, opt.limits).req);
    } catch (const ApiException& e) {
      throw std::runtime_error("invalid request: " + e.error.message);
    }  // an Error from resolve fails the job with its message
    std::atomic<bool> stop{false};
    bool abandoned = false;
    ProgressFn on_progress = [&](const Progress& p) {
      if (opt.abandon && opt.abandon->load()) abandoned = true;
      if (p.phase == "denoise" && progress(p.step, p.total)) stop = true;
      if (abandoned) stop = true;
    };
    const auto t0 = std::chrono::steady_clock::now();
    GenerateResult r;
    try {
      r = engine.generate(req, on_progress, &stop);
    } catch (const Cancelled&) {
      if (abandoned) throw RedisRetryableError("the worker shut down during the job");
      return {};  // cancelled, or taken over: RedisWorker ends it (or leaves it to the new owner)
    } catch (const OutOfMemory& e) {
      throw RedisRetryableError(std::string("out of memory: ") + e.what());
    }
    RedisResult out;
    for (size_t k = 0; k < r.images.size(); ++k) {
      const Image& im = r.images[k];
      const ImageMeta meta = image_meta(r, int(k), opt.model_name, r.resolved.seed);
      const std::vector<uint8_t> png = encode_png(im.width, im.height, im.rgb, png_metadata(meta));
      out.images.emplace_back(png.begin(), png.end());
    }
    out.info = describe_result(r).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (opt.log_jobs)
      std::fprintf(stderr, "job id=%s attempt=%d size=%dx%d steps=%d images=%zu seconds=%.3f\n", c.id.c_str(),
                   c.attempt, r.resolved.width, r.resolved.height, r.resolved.steps, r.images.size(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return out;
  };
}

}  // namespace ernie::server
