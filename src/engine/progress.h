// Progress reporting for the CLI: a one-line terminal bar (phase, step/total, it/s, ETA), JSON lines
// (`--progress json`, one object per event on the stream), or nothing (`--quiet`).
#pragma once
#include <chrono>
#include <cstdio>
#include <string>

#include "engine/engine.h"

namespace ernie {

enum class ProgressMode { Bar, Json, Quiet };
ProgressMode parse_progress_mode(const std::string& s);  // "bar", "json", "quiet"; throws otherwise

class ProgressPrinter {
 public:
  // `out` is usually stderr. The bar redraws in place on a terminal and prints one line per finished
  // phase elsewhere.
  explicit ProgressPrinter(ProgressMode mode, std::FILE* out = stderr);
  ~ProgressPrinter();
  void operator()(const Progress& p);
  void finish();  // ends the bar's line
  // A function that forwards to this printer (the printer must outlive it).
  ProgressFn fn() {
    return [this](const Progress& p) { (*this)(p); };
  }

  // Formatting, exposed for tests. rate_per_s <= 0 means unknown.
  static std::string format_bar(const Progress& p, double rate_per_s, double eta_s, int width);
  static std::string format_json(const Progress& p, double rate_per_s, double eta_s);

 private:
  ProgressMode mode_;
  std::FILE* out_;
  bool tty_ = false, line_open_ = false;
  std::string phase_;
  std::chrono::steady_clock::time_point last_draw_;
  int last_total_ = 0, last_step_ = 0;
  double last_elapsed_ = 0;
  void end_phase();
};

}  // namespace ernie
