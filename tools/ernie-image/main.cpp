// ernie-image: the command line over the library. Subcommands register themselves (commands.h).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>

#include "commands.h"
#include "core/error.h"

namespace ernie::cli {
std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}
}  // namespace ernie::cli

int main(int argc, char** argv) {
  using namespace ernie::cli;
  CLI::App app{"ernie-image: native engine for ERNIE-Image and ERNIE-Image-Turbo", "ernie-image"};
  app.set_version_flag("--version", std::string(ERNIE_VERSION));
  app.require_subcommand(1);
  std::vector<Command> cmds = registry();
  std::sort(cmds.begin(), cmds.end(), [](auto& a, auto& b) { return a.order < b.order; });
  std::vector<std::pair<CLI::App*, std::function<int()>>> runs;
  for (auto& c : cmds) {
    size_t before = app.get_subcommands({}).size();
    auto run = c.setup(app);
    runs.push_back({app.get_subcommands({})[before], run});
  }
  CLI11_PARSE(app, argc, argv);
  for (auto& [sub, run] : runs) {
    if (!sub->parsed()) continue;
    try {
      return run();
    } catch (const ernie::Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "error: out of host memory\n");
      return 1;
    } catch (const std::filesystem::filesystem_error& e) {  // a path the library did not check first
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    } catch (const std::exception& e) {  // every exception becomes an error message, never an abort
      std::fprintf(stderr, "error: internal error: %s\n", e.what());
      return 1;
    }
  }
  return 1;
}
