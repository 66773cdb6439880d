// One CPU engine on the tiny model (every component resident), opened once per test binary.
#pragma once
#include <memory>

#include "engine/engine.h"
#include "golden.h"

namespace ernie::test {

inline Engine& tiny_engine() {
  static std::unique_ptr<Engine> p = [] {
    EngineOptions o;
    o.device = "cpu";
    o.default_offload = Offload::None;
    o.model = tiny_model();
    return Engine::open(o);
  }();
  return *p;
}

}  // namespace ernie::test
