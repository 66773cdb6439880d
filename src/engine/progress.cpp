#include "engine/progress.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include "core/error.h"

namespace ernie {

ProgressMode parse_progress_mode(const std::string& s) {
  if (s == "bar") return ProgressMode::Bar;
  if (s == "json") return ProgressMode::Json;
  if (s == "quiet" || s == "none") return ProgressMode::Quiet;
  fail("--progress: unknown mode '", s, "' (use bar, json or quiet)");
}

ProgressPrinter::ProgressPrinter(ProgressMode mode, std::FILE* out) : mode_(mode), out_(out) {
  tty_ = out_ && ::isatty(::fileno(out_));
}

ProgressPrinter::~ProgressPrinter() { finish(); }

namespace {
std::string fmt_duration(double s) {
  if (!(s >= 0) || !std::isfinite(s)) return "?";
  long t = long(std::lround(s));
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else if (t >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}
}  // namespace

std::string ProgressPrinter::format_bar(const Progress& p, double rate, double eta, int width) {
  char head[64], tail[96];
  std::snprintf(head, sizeof head, "%-7s ", p.phase.c_str());
  if (p.total > 0 && p.step >= p.total) {  // finished: the time it took (and the rate when it is a loop)
    if (p.total > 1 && rate > 0)
      std::snprintf(tail, sizeof tail, " %d/%d  %.2fs  %.2f %s", p.step, p.total, p.elapsed_s, rate >= 1 ? rate : 1 / rate,
                    rate >= 1 ? "it/s" : "s/it");
    else
      std::snprintf(tail, sizeof tail, " %d/%d  %.2fs", p.step, p.total, p.elapsed_s);
  } else if (rate > 0) {
    if (rate >= 1) std::snprintf(tail, sizeof tail, " %d/%d  %.2f it/s  ETA %s", p.step, p.total, rate, fmt_duration(eta).c_str());
    else std::snprintf(tail, sizeof tail, " %d/%d  %.2f s/it  ETA %s", p.step, p.total, 1 / rate, fmt_duration(eta).c_str());
  } else {
    std::snprintf(tail, sizeof tail, " %d/%d  %s", p.step, p.total, fmt_duration(p.elapsed_s).c_str());
  }
  int bar = width - int(std::string(head).size() + std::string(tail).size()) - 2;
  if (bar < 10) bar = 10;
  int filled = p.total > 0 ? int(double(bar) * std::min(p.step, p.total) / p.total) : 0;
  return std::string(head) + "[" + std::string(size_t(filled), '#') + std::string(size_t(bar - filled), '.') + "]" + tail;
}

std::string ProgressPrinter::format_json(const Progress& p, double rate, double eta) {
  nlohmann::json j = {{"phase", p.phase}, {"step", p.step}, {"total", p.total},
                      {"elapsed_s", std::round(p.elapsed_s * 1000) / 1000}};
  if (rate > 0) {
    j["it_per_s"] = std::round(rate * 1000) / 1000;
    j["eta_s"] = std::round(eta * 1000) / 1000;
  }
  return j.dump();
}

void ProgressPrinter::end_phase() {
  if (mode_ != ProgressMode::Bar || phase_.empty()) return;
  if (tty_) {
    if (line_open_) std::fputc('\n', out_);
  } else {
    std::fprintf(out_, "%s: %d/%d in %.2fs\n", phase_.c_str(), last_step_, last_total_, last_elapsed_);
  }
  line_open_ = false;
  std::fflush(out_);
}

void ProgressPrinter::operator()(const Progress& p) {
  if (mode_ == ProgressMode::Quiet || !out_) return;
  if (p.phase != phase_) {
    end_phase();
    phase_ = p.phase;
  }
  last_step_ = p.step;
  last_total_ = p.total;
  last_elapsed_ = p.elapsed_s;
  // The rate counts units done since the phase began (elapsed_s is since the phase began).
  double rate = (p.step > 0 && p.elapsed_s > 0) ? p.step / p.elapsed_s : 0;
  double eta = rate > 0 ? (p.total - p.step) / rate : -1;
  if (mode_ == ProgressMode::Json) {
    std::fprintf(out_, "%s\n", format_json(p, rate, eta).c_str());
    std::fflush(out_);
    return;
  }
  if (!tty_) return;
  auto now = std::chrono::steady_clock::now();
  bool last = p.step >= p.total;
  if (!last && line_open_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  std::fprintf(out_, "\r%s\033[K", format_bar(p, rate, eta, 80).c_str());
  line_open_ = true;
  std::fflush(out_);
}

void ProgressPrinter::finish() {
  end_phase();
  phase_.clear();
}

}  // namespace ernie
