// Each subcommand lives in its own file and registers itself here; main() builds the CLI from them.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <vector>

namespace ernie::cli {

// `setup` adds a subcommand to the app and returns the function that runs it (its exit status).
using Setup = std::function<std::function<int()>(CLI::App&)>;
struct Command {
  int order;
  Setup setup;
};
std::vector<Command>& registry();
// Set by a command running with `--progress json`: main then reports its error as one JSON line on stdout,
// {"event": "error", "message": ...}, instead of "error: ..." on stderr (the exit status stays 1).
inline bool json_errors = false;
struct Register {
  Register(int order, Setup s) { registry().push_back({order, std::move(s)}); }
};

}  // namespace ernie::cli
