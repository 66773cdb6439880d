#include "convert/calibration.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/file.h"
#include "ops/ops.h"
#include "engine/engine.h"

namespace ernie {

std::vector<std::string> read_prompt_list(const std::string& path) {
  std::string text;
  try {
    text = read_regular_file(path, size_t(64) << 20);
  } catch (const Error& e) {
    fail("cannot open the calibration prompts: ", e.what());
  }
  std::istringstream in(text);
  std::vector<std::string> prompts;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    prompts.push_back(line);
  }
  ERNIE_CHECK(!prompts.empty(), path, ": no prompt (one per line; blank lines and '#' comments are skipped)");
  return prompts;
}

std::map<std::string, float> calibrate_dit_inputs(const std::string& model, const std::vector<std::string>& prompts,
                                                  const CalibrationOptions& opt,
                                                  const std::function<void(int, int)>& progress) {
  ERNIE_CHECK(!prompts.empty(), "calibration: no prompts");
  std::map<std::string, float> amax;
  size_t prompt = 0;
  EngineOptions po;
  po.model = model;
  po.device = opt.device.str();
  po.dtype = dtype_name(opt.dtype);
  po.default_offload = Offload::None;  // every prompt on the same resident components
  po.observe_dit_inputs = [&](const std::string& weight, const Tensor& x) {
    const float m = ops::max_abs(x);
    ERNIE_CHECK(std::isfinite(m), "calibration: the input of ", weight, " is not finite (prompt ",
                std::to_string(prompt + 1), ")");
    float& best = amax[weight];
    best = std::max(best, m);
  };
  std::unique_ptr<Engine> p = Engine::open(po);
  for (prompt = 0; prompt < prompts.size(); ++prompt) {
    GenerateRequest req;
    req.prompt = prompts[prompt];
    req.width = opt.width, req.height = opt.height, req.steps = opt.steps, req.cfg = opt.cfg;
    req.seed = opt.seed + prompt;
    p->generate(p->resolve(req));
    if (progress) progress(int(prompt + 1), int(prompts.size()));
  }
  return amax;
}

}  // namespace ernie
