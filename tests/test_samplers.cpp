// The multistep samplers against diffusers (tests/data/samplers-lora/golden2.*): DPMSolverMultistepScheduler
// (dpmpp_2m) and UniPCMultistepScheduler (unipc) in flow-matching form, sigmas and timesteps of the schedule and
// the final latents of an end-to-end run on the tiny model from the given initial latents, CPU f32.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/samplers/flow_solver.h"
#include "engine/scheduler.h"
#include "golden.h"
#include "golden2_cases.h"
#include "tiny_engine.h"
#include "io/model_folder.h"
#include "io/safetensors.h"
#include "ops/ops.h"

using namespace ernie;

namespace {

using test::golden2;
using test::tiny_engine;
nlohmann::json golden2_case(int n) { return test::golden2_json()["samplers"][size_t(n)]; }

const SchedulerConfig& tiny_scheduler() {
  static ModelFolder m = ModelFolder::open(test::tiny_model());
  return m.scheduler;
}

GenerateRequest request_for(int n, SamplerKind kind) { return test::sampler_request(n, kind); }

struct Param {
  int n;
  SamplerKind kind;
};
void PrintTo(const Param& p, std::ostream* os) { *os << "case" << p.n << "_" << sampler_id(p.kind); }

}  // namespace

class SamplerGolden : public ::testing::TestWithParam<Param> {};

// The configs the golden data was made with are the ones implemented here.
TEST_P(SamplerGolden, ConfigIsTheImplementedOne) {
  const Param p = GetParam();
  nlohmann::json c = golden2_case(p.n)["config"][sampler_id(p.kind)];
  EXPECT_EQ(c["solver_order"], 2);
  EXPECT_EQ(c["prediction_type"], "flow_prediction");
  EXPECT_EQ(c["use_flow_sigmas"], true);
  EXPECT_EQ(c["final_sigmas_type"], "zero");
  EXPECT_EQ(c["lower_order_final"], true);
  EXPECT_EQ(c["timestep_spacing"], "linspace");
  EXPECT_DOUBLE_EQ(c["flow_shift"].get<double>(), tiny_scheduler().shift);
  if (p.kind == SamplerKind::DpmPP2M) {
    EXPECT_EQ(c["algorithm_type"], "dpmsolver++");
    EXPECT_EQ(c["solver_type"], "midpoint");
    EXPECT_EQ(c["euler_at_final"], false);
  } else {
    EXPECT_EQ(c["solver_type"], "bh2");
    EXPECT_EQ(c["predict_x0"], true);
    EXPECT_TRUE(c["disable_corrector"].empty());
  }
}

TEST_P(SamplerGolden, SigmasAndTimesteps) {
  const Param p = GetParam();
  const std::string k = "samplers.case." + std::to_string(p.n) + "." + sampler_id(p.kind) + ".";
  const int steps = golden2_case(p.n)["steps"].get<int>();
  auto solver = make_flow_solver(p.kind, tiny_scheduler(), steps, 0);
  Tensor sig = Tensor::from_vector(solver->sigmas(), {int64_t(solver->sigmas().size())});
  Tensor ts = Tensor::from_vector(solver->timesteps(), {int64_t(solver->timesteps().size())});
  EXPECT_TRUE(test::tensors_close(sig, golden2().tensor(k + "sigmas"), test::kCpuRelL2));
  EXPECT_EQ(ts.to_vector(), golden2().tensor(k + "timesteps").to_vector());  // integers: exact
}

TEST_P(SamplerGolden, FinalLatentsMatchReference) {
  const Param p = GetParam();
  GenerateResult res = tiny_engine().generate(request_for(p.n, p.kind));
  const std::string k = "samplers.case." + std::to_string(p.n) + "." + sampler_id(p.kind) + ".latents_final";
  auto close = test::tensors_close(res.latents, golden2().tensor(k), test::kCpuRelL2);
  EXPECT_TRUE(close) << k;
  std::printf("%s: %s\n", k.c_str(), close.message());
  EXPECT_EQ(res.resolved.sampler, p.kind);
  EXPECT_FLOAT_EQ(res.resolved.shift, 4.0f);  // the model's, recorded
}

INSTANTIATE_TEST_SUITE_P(Tiny, SamplerGolden,
                         ::testing::Values(Param{0, SamplerKind::DpmPP2M}, Param{0, SamplerKind::UniPC},
                                           Param{1, SamplerKind::DpmPP2M}, Param{1, SamplerKind::UniPC}),
                         [](const auto& info) {
                           return "case" + std::to_string(info.param.n) + "_" + sampler_id(info.param.kind);
                         });

// The samplers differ from Euler and from each other on the same noise (the golden data says by how much).
TEST(Samplers, DifferFromEachOther) {
  Tensor e = tiny_engine().generate(request_for(0, SamplerKind::Euler)).latents;
  Tensor d = golden2().tensor("samplers.case.0.dpmpp_2m.latents_final");
  Tensor u = golden2().tensor("samplers.case.0.unipc.latents_final");
  EXPECT_FALSE(test::tensors_close(e, d, 1e-2));
  EXPECT_FALSE(test::tensors_close(d, u, 1e-2));
}

// Euler through the solver interface is the FlowMatch scheduler, step for step.
TEST(Samplers, EulerSolverIsTheScheduler) {
  FlowMatchEulerScheduler s(tiny_scheduler());
  s.set_timesteps(7);
  auto e = make_flow_solver(SamplerKind::Euler, tiny_scheduler(), 7, 0);
  EXPECT_EQ(e->sigmas(), s.sigmas());
  EXPECT_EQ(e->timesteps(), s.timesteps());
  Tensor x = test::rnd({1, 4, 2, 2}, 1), v = test::rnd({1, 4, 2, 2}, 2);
  EXPECT_EQ(e->step(x, v, 3).to_vector(), s.step(x, v, 3).to_vector());
}

// --shift: the schedule follows it (shift 1 is the plain linear schedule), for every sampler.
TEST(Samplers, ShiftOverride) {
  for (SamplerKind k : {SamplerKind::Euler, SamplerKind::DpmPP2M, SamplerKind::UniPC}) {
    auto base = make_flow_solver(k, tiny_scheduler(), 4, 0), one = make_flow_solver(k, tiny_scheduler(), 4, 0, 1.0f);
    auto six = make_flow_solver(k, tiny_scheduler(), 4, 0, 6.0f);
    EXPECT_GT(base->sigmas()[1], one->sigmas()[1]) << sampler_id(k);
    EXPECT_GT(six->sigmas()[1], base->sigmas()[1]) << sampler_id(k);
    EXPECT_EQ(base->sigmas().back(), 0.0f);
    // shift 1, 4 steps: Euler 1 - i/N; DPM++ flip(1 - linspace(1, 1/T, N+1)); UniPC linspace(1, 1/T, N+1)
    const double want = k == SamplerKind::Euler ? 0.5 : k == SamplerKind::DpmPP2M ? 0.5 * 0.999 : 1.0 - 0.5 * 0.999;
    EXPECT_NEAR(one->sigmas()[2], want, 1e-6) << sampler_id(k);
  }
  // the explicit shift equal to the model's changes nothing
  auto a = make_flow_solver(SamplerKind::UniPC, tiny_scheduler(), 5, 0),
       b = make_flow_solver(SamplerKind::UniPC, tiny_scheduler(), 5, 0, 4.0f);
  EXPECT_EQ(a->sigmas(), b->sigmas());
  test::expect_error([] { make_flow_solver(SamplerKind::DpmPP2M, tiny_scheduler(), 4, 0, std::nanf("")); }, "--shift");
  test::expect_error([] { make_flow_solver(SamplerKind::DpmPP2M, tiny_scheduler(), 4, 0, -1.0f); }, "--shift");
}

// One step runs to the x0 prediction (the final step is first order to sigma 0): x - sigma_0 v.
TEST(Samplers, SingleStepIsTheX0Prediction) {
  Tensor x = test::rnd({1, 4, 2, 2}, 3), v = test::rnd({1, 4, 2, 2}, 4);
  for (SamplerKind k : {SamplerKind::DpmPP2M, SamplerKind::UniPC}) {
    auto s = make_flow_solver(k, tiny_scheduler(), 1, 0);
    ASSERT_EQ(s->num_steps(), 1);
    Tensor want = ops::add(x, ops::scale(v, -s->sigmas()[0]));
    EXPECT_TRUE(test::tensors_close(s->step(x, v, 0), want, 1e-6)) << sampler_id(k);
  }
}

TEST(Samplers, ParseNames) {
  EXPECT_EQ(parse_sampler("euler"), SamplerKind::Euler);
  EXPECT_EQ(parse_sampler("dpmpp_2m"), SamplerKind::DpmPP2M);
  EXPECT_EQ(parse_sampler("dpm++2m"), SamplerKind::DpmPP2M);  // stable-diffusion.cpp
  EXPECT_EQ(parse_sampler("DPM++ 2M"), SamplerKind::DpmPP2M);  // A1111
  EXPECT_EQ(parse_sampler("unipc"), SamplerKind::UniPC);
  EXPECT_EQ(parse_sampler("uni_pc"), SamplerKind::UniPC);      // ComfyUI
  EXPECT_STREQ(sampler_a1111(SamplerKind::DpmPP2M), "DPM++ 2M");
  test::expect_error([] { parse_sampler("euler_a"); }, "choose one of euler, dpmpp_2m (dpm++2m), unipc");
  test::expect_error([] { parse_sampler(""); }, "--sampler ''");
}

// Requests: a bad shift is rejected before compute; samplers and shifts never share a batch.
TEST(Samplers, RequestValidation) {
  GenerateRequest r = request_for(1, SamplerKind::UniPC);
  r.shift = std::nanf("");
  test::expect_error([&] { tiny_engine().resolve(r); }, "shift");
  r.shift = -2;
  test::expect_error([&] { tiny_engine().resolve(r); }, "shift");
  r.shift = 0;
  EXPECT_FLOAT_EQ(tiny_engine().resolve(r).shift, 4.0f);
  GenerateRequest e = request_for(1, SamplerKind::Euler);
  test::expect_error([&] { tiny_engine().generate_batch({r, e}); }, "sampler");
}
