// Progress reporting for the CLI: a one-line terminal bar (phase, step/total, it/s, ETA), plain lines
// where the stream is not a terminal (tqdm's non-TTY style), JSON lines (`--progress json`), or nothing.
#pragma once
#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/engine.h"

namespace ernie {

// Auto: Bar on a terminal, Plain elsewhere (resolved by the printer, from its stream).
enum class ProgressMode { Auto, Bar, Plain, Json, Quiet };
// "auto", "bar", "plain", "json", "none" (or "quiet"); throws otherwise.
ProgressMode parse_progress_mode(const std::string& s);

class ProgressPrinter {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;  // the bar's redraw limit reads it
  // `out` is usually stderr (stdout for Json: the CLI's machine-readable output). The bar redraws in place.
  explicit ProgressPrinter(ProgressMode mode, std::FILE* out = stderr, Clock clock = {});
  ~ProgressPrinter();
  ProgressMode mode() const { return mode_; }
  void operator()(const Progress& p);
  void finish();  // ends the bar's line
  // A note for the user: Json prints {"event": level, "message": text}; the other modes (Quiet too: it
  // means no progress, `-q` leaves the call out) print "level: text" ("info": the text alone).
  void message(const std::string& level, const std::string& text);
  void event(const nlohmann::ordered_json& j);  // keys in the order given: "event" first  // Json only: one line (other modes print nothing)
  // A function that forwards to this printer (the printer must outlive it).
  ProgressFn fn() {
    return [this](const Progress& p) { (*this)(p); };
  }

  // Formatting, exposed for tests. rate_per_s <= 0 means unknown; eta_s < 0 too.
  static std::string format_bar(const Progress& p, double rate_per_s, double eta_s, int width);
  static std::string format_plain(const Progress& p, double rate_per_s, double eta_s);  // "denoise 3/8 [00:01<00:02, 2.41 it/s]"
  static std::string format_json(const Progress& p, double rate_per_s, double eta_s);
  // Plain mode prints a step when this says so: every step of a short loop (20 or fewer), else the first,
  // the last and one each 5 % of the total. `last_printed` is the step printed before in this phase (0: none).
  static bool plain_due(int step, int total, int last_printed);
  static std::string json_line(const nlohmann::ordered_json& j);  // one line; invalid UTF-8 replaced, never thrown

 private:
  ProgressMode mode_;
  std::FILE* out_;
  Clock clock_;
  bool line_open_ = false;
  std::string phase_;
  std::chrono::steady_clock::time_point last_draw_;
  int last_step_ = 0, last_printed_ = 0;
  void end_phase();
};

}  // namespace ernie
