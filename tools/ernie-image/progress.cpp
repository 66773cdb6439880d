#include "progress.h"

#include <cmath>

#include <unistd.h>

#include "core/error.h"

namespace ernie {

ProgressMode parse_progress_mode(const std::string& s) {
  if (s == "auto") return ProgressMode::Auto;
  if (s == "bar") return ProgressMode::Bar;
  if (s == "plain") return ProgressMode::Plain;
  if (s == "json") return ProgressMode::Json;
  if (s == "none" || s == "quiet") return ProgressMode::Quiet;
  fail("--progress: unknown mode '", s, "' (use auto, bar, plain, json or none)");
}

ProgressPrinter::ProgressPrinter(ProgressMode mode, std::FILE* out, Clock clock)
    : mode_(mode), out_(out), clock_(clock ? std::move(clock) : Clock(&std::chrono::steady_clock::now)) {
  if (mode_ == ProgressMode::Auto) mode_ = out_ && ::isatty(::fileno(out_)) ? ProgressMode::Bar : ProgressMode::Plain;
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

// tqdm's clock (whole seconds, truncated): 00:07, 03:16, 1:02:03; "?" when unknown.
std::string fmt_clock(double s) {
  if (!(s >= 0) || !std::isfinite(s)) return "?";
  long t = long(s);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%02ld:%02ld", t / 60, t % 60);
  return buf;
}

double round3(double v) { return std::round(v * 1000) / 1000; }
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

std::string ProgressPrinter::format_plain(const Progress& p, double rate, double eta) {
  char r[32], line[256];
  if (rate >= 1) std::snprintf(r, sizeof r, "%.2f it/s", rate);
  else if (rate > 0) std::snprintf(r, sizeof r, "%.2f s/it", 1 / rate);
  else std::snprintf(r, sizeof r, "?it/s");
  std::snprintf(line, sizeof line, "%s %d/%d [%s<%s, %s]", p.phase.c_str(), p.step, p.total,
                fmt_clock(p.elapsed_s).c_str(), fmt_clock(eta).c_str(), r);
  return line;
}

std::string ProgressPrinter::format_json(const Progress& p, double rate, double eta) {
  nlohmann::ordered_json j = {{"event", "progress"}, {"phase", p.phase}, {"step", p.step}, {"total", p.total},
                      {"elapsed_s", round3(p.elapsed_s)}};
  if (rate > 0) {
    j["it_s"] = round3(rate);
    if (eta >= 0) j["eta_s"] = round3(eta);
  }
  return json_line(j);
}

bool ProgressPrinter::plain_due(int step, int total, int last_printed) {
  if (step < 1 || total < 1 || step <= last_printed) return false;
  if (total <= 20 || step == 1 || step >= total) return true;
  return int64_t(step) * 20 / total > int64_t(last_printed) * 20 / total;
}

std::string ProgressPrinter::json_line(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void ProgressPrinter::end_phase() {
  if (mode_ == ProgressMode::Bar && line_open_) {
    std::fputc('\n', out_);
    std::fflush(out_);
  }
  line_open_ = false;
}

void ProgressPrinter::operator()(const Progress& p) {
  if (mode_ == ProgressMode::Quiet || !out_) return;
  if (p.phase != phase_ || p.step < last_step_) {  // a new phase, or the same one again (a second `load`)
    end_phase();
    phase_ = p.phase;
    last_printed_ = 0;
  }
  last_step_ = p.step;
  // The rate counts units done since the phase began (elapsed_s is since the phase began).
  double rate = (p.step > 0 && p.elapsed_s > 0) ? p.step / p.elapsed_s : 0;
  double eta = rate > 0 ? (p.total - p.step) / rate : -1;
  if (mode_ == ProgressMode::Json) {
    std::fprintf(out_, "%s\n", format_json(p, rate, eta).c_str());
  } else if (mode_ == ProgressMode::Plain) {
    if (!plain_due(p.step, p.total, last_printed_)) return;
    last_printed_ = p.step;
    std::fprintf(out_, "%s\n", format_plain(p, rate, eta).c_str());
  } else {
    auto now = clock_();
    bool last = p.step >= p.total;
    if (!last && line_open_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    std::fprintf(out_, "\r%s\033[K", format_bar(p, rate, eta, 80).c_str());
    line_open_ = true;
  }
  std::fflush(out_);
}

void ProgressPrinter::message(const std::string& level, const std::string& text) {
  if (!out_) return;
  if (mode_ == ProgressMode::Json) return event({{"event", level}, {"message", text}});
  end_phase();  // a note never overwrites the bar
  std::fprintf(out_, "%s%s\n", level == "info" ? "" : (level + ": ").c_str(), text.c_str());
  std::fflush(out_);
}

void ProgressPrinter::event(const nlohmann::ordered_json& j) {
  if (mode_ != ProgressMode::Json || !out_) return;
  std::fprintf(out_, "%s\n", json_line(j).c_str());
  std::fflush(out_);
}

void ProgressPrinter::finish() {
  end_phase();
  phase_.clear();
  last_step_ = last_printed_ = 0;
}

}  // namespace ernie
