// ernie-image: the command line over the library. Subcommands register themselves (commands.h).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "ops/ops.h"

namespace ernie::cli {
std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

// The closest of `names` to `word` when it is close enough to be a typo; else "".
std::string closest(const std::string& word, const std::vector<std::string>& names) {
  std::string best;
  size_t d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string& n : names)
    if (size_t e = edit_distance(word, n); e < d) d = e, best = n;
  return best;
}

// "did you mean" for a mistyped command or flag (CLI11 only says what it did not expect): the message (mistyped
// flags one after the other), or "" when there is nothing to suggest.
std::string suggest(const CLI::App& app, int argc, char** argv) {
  const CLI::App* sub = nullptr;
  std::vector<std::string> commands;  // the listed ones (random-model is hidden)
  for (const CLI::App* s : app.get_subcommands({})) {
    if (argc >= 2 && s->get_name() == argv[1]) sub = s;
    if (!s->get_group().empty()) commands.push_back(s->get_name());
  }
  std::string all;
  for (const std::string& n : commands) all += (all.empty() ? "" : ", ") + n;
  const std::string list = "\ncommands: " + all + " (ernie-image --help)";
  if (argc < 2 || argv[1][0] == '-') {  // no command first: a command further on is CLI11's to explain
    for (int i = 1; i < argc; ++i)
      if (std::find(commands.begin(), commands.end(), argv[i]) != commands.end()) return "";
    return "a command is required" + list;
  }
  const std::string cmd = argv[1];
  if (!sub) {
    const std::string c = closest(cmd, commands);
    return "unknown command '" + cmd + "'" + (c.empty() ? "" : "; did you mean '" + c + "'?") + list;
  }
  std::vector<std::string> flags;
  for (const CLI::Option* o : sub->get_options())
    for (const std::string& n : o->get_lnames()) flags.push_back("--" + n);
  std::string msg;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0 || a == "--") continue;
    a = a.substr(0, a.find('='));
    if (std::find(flags.begin(), flags.end(), a) != flags.end()) continue;
    const std::string c = closest(a, flags);
    msg += (msg.empty() ? "" : "; ") + cmd + " has no flag " + a + (c.empty() ? "" : "; did you mean " + c + "?");
  }
  return msg;
}

// Whether the command line asks for JSON lines (`--progress json`), so that even a malformed one fails as JSON.
bool wants_json(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--progress=json" || (a == "--progress" && i + 1 < argc && std::string(argv[i + 1]) == "json")) return true;
  }
  return false;
}

#ifndef ERNIE_GIT_COMMIT
#define ERNIE_GIT_COMMIT ""
#endif

// `ernie-image --version`: "ernie-image 0.1.0 (commit 0123456789ab, Redis queue, CUDA built in)".
std::string version_line() {
  const std::string commit = ERNIE_GIT_COMMIT;
#ifdef ERNIE_HAVE_REDIS
  const char* redis = "Redis queue, ";  // serve --queue
#else
  const char* redis = "";
#endif
  return std::string("ernie-image ") + ERNIE_VERSION + " (" + (commit.empty() ? "" : "commit " + commit + ", ") +
         redis + (ernie::ops::cuda_built() ? "CUDA built in" : "CPU only: built without CUDA") + ")";
}

// A command's error, as text on stderr or (json_errors) a JSON line on stdout; returns the exit status.
int report(const std::string& message) {
  if (json_errors) {
    nlohmann::ordered_json j = {{"event", "error"}, {"message", message}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    std::fflush(stdout);
  } else {
    std::fprintf(stderr, "error: %s\n", message.c_str());
  }
  return 1;
}

}  // namespace
}  // namespace ernie::cli

int main(int argc, char** argv) {
  using namespace ernie::cli;
  CLI::App app{"ernie-image: native engine for ERNIE-Image and ERNIE-Image-Turbo", "ernie-image"};
  app.set_version_flag("--version", version_line());
  app.require_subcommand(1);
  std::vector<Command> cmds = registry();
  std::sort(cmds.begin(), cmds.end(), [](auto& a, auto& b) { return a.order < b.order; });
  std::vector<std::pair<CLI::App*, std::function<int()>>> runs;
  for (auto& c : cmds) {
    size_t before = app.get_subcommands({}).size();
    auto run = c.setup(app);
    runs.push_back({app.get_subcommands({})[before], run});
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    const std::string hint = suggest(app, argc, argv);
    json_errors = wants_json(argc, argv);
    if (!hint.empty() || json_errors) {
      report(hint.empty() ? e.what() : hint);
      return e.get_exit_code();
    }
    return app.exit(e);
  }
  for (auto& [sub, run] : runs) {
    if (!sub->parsed()) continue;
    try {
      return run();
    } catch (const ernie::Error& e) {
      return report(e.what());
    } catch (const std::bad_alloc&) {
      return report("out of host memory");
    } catch (const std::filesystem::filesystem_error& e) {  // a path the library did not check first
      return report(e.what());
    } catch (const std::exception& e) {  // every exception becomes an error message, never an abort
      return report(std::string("internal error: ") + e.what());
    }
  }
  return 1;
}
