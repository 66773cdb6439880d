// ernie-image doctor [--model DIR] [--json] [--verify]
#include <cstdio>

#include "commands.h"
#include "doctor/doctor.h"
#include "engine_flags.h"

namespace ernie::cli {
namespace {
struct Opts {
  std::string model;
  bool json = false, verify = false;
  ComponentFiles files;
};
Register reg(90, [](CLI::App& app) {
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("doctor", "Check this machine (GPUs, libraries) and a model folder; exit 0 when all is well");
  c->add_option("--model,-m", o->model, "model folder (diffusers layout) or converted file to check");
  add_component_flags(*c, o->files);
  c->add_flag("--json", o->json, "print the report as JSON");
  c->add_flag("--verify", o->verify,
              "read the data of each safetensors file that records a checksum (files written by ernie-image) and "
              "compare it");
  return std::function<int()>([o] {
    DoctorOptions opt;
    opt.verify = o->verify;
    opt.files = o->files;
    DoctorReport r = run_doctor(o->model, opt);
    if (o->json) std::printf("%s\n", r.json.dump(2).c_str());
    else std::fputs(format_doctor(r.json).c_str(), stdout);
    return r.problems == 0 ? 0 : 1;
  });
});
}  // namespace
}  // namespace ernie::cli
