// Progress formatting: the terminal bar, the plain lines (stream not a terminal) and the JSON lines. Times
// come from the events and an injected clock, never from the wall.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "ernie-image/progress.h"

using namespace ernie;

namespace {

// What a printer wrote to a temporary file.
std::string read_all(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  for (int c; (c = std::fgetc(f)) != EOF;) s += char(c);
  return s;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

// A load, then `steps` denoising steps of 0.5 s each, as the engine reports them (from step 0).
void feed(ProgressPrinter& pr, int steps) {
  pr({"load", 0, 1, 0});
  pr({"load", 1, 1, 0.25});
  for (int i = 0; i <= steps; ++i) pr({"denoise", i, steps, 0.5 * i});
  pr.finish();
}

}  // namespace

TEST(Progress, BarShowsStepRateAndEta) {
  std::string s = ProgressPrinter::format_bar({"denoise", 3, 8, 2.0}, 1.5, 3.3, 80);
  EXPECT_NE(s.find("denoise"), std::string::npos);
  EXPECT_NE(s.find("3/8"), std::string::npos);
  EXPECT_NE(s.find("1.50 it/s"), std::string::npos);
  EXPECT_NE(s.find("ETA 3s"), std::string::npos);
  EXPECT_LE(s.size(), 80u);
  EXPECT_NE(ProgressPrinter::format_bar({"denoise", 1, 50, 4.0}, 0.25, 196, 80).find("4.00 s/it  ETA 3m16s"),
            std::string::npos);
  std::string done = ProgressPrinter::format_bar({"denoise", 8, 8, 2.0}, 4.0, 0, 80);
  EXPECT_NE(done.find("8/8  2.00s  4.00 it/s"), std::string::npos) << done;
  EXPECT_EQ(done.find("ETA"), std::string::npos);
  EXPECT_NE(ProgressPrinter::format_bar({"decode", 1, 1, 0.5}, 2.0, 0, 80).find("1/1  0.50s"), std::string::npos);
}

TEST(Progress, PlainLineLikeTqdm) {
  EXPECT_EQ(ProgressPrinter::format_plain({"denoise", 3, 8, 1.245}, 2.41, 2.07), "denoise 3/8 [00:01<00:02, 2.41 it/s]");
  EXPECT_EQ(ProgressPrinter::format_plain({"denoise", 1, 50, 4.0}, 0.25, 196), "denoise 1/50 [00:04<03:16, 4.00 s/it]");
  EXPECT_EQ(ProgressPrinter::format_plain({"load", 0, 1, 0}, 0, -1), "load 0/1 [00:00<?, ?it/s]");
  EXPECT_EQ(ProgressPrinter::format_plain({"denoise", 999, 1000, 3723}, 0.268, 3.7),
            "denoise 999/1000 [1:02:03<00:03, 3.73 s/it]");
}

TEST(Progress, PlainEveryStepOfAShortLoopAndEachFivePercentOfALongOne) {
  auto printed = [](int total) {
    std::vector<int> v;
    for (int s = 0, last = 0; s <= total; ++s)
      if (ProgressPrinter::plain_due(s, total, last)) v.push_back(last = s);
    return v;
  };
  EXPECT_EQ(printed(8), (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(printed(1), (std::vector<int>{1}));
  std::vector<int> hundred{1};
  for (int s = 5; s <= 100; s += 5) hundred.push_back(s);
  EXPECT_EQ(printed(100), hundred);
  std::vector<int> thousand = printed(1000);
  EXPECT_EQ(thousand.size(), 21u);
  EXPECT_EQ(thousand.front(), 1);
  EXPECT_EQ(thousand[1], 50);
  EXPECT_EQ(thousand.back(), 1000);
  EXPECT_EQ(printed(0), std::vector<int>{});
}

TEST(Progress, AutoOnAFileIsPlainLines) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressPrinter pr(ProgressMode::Auto, f);
    EXPECT_EQ(pr.mode(), ProgressMode::Plain);
    feed(pr, 4);
    pr.message("warning", "careful");
    pr.event({{"event", "done"}});  // JSON mode only
  }
  std::vector<std::string> l = lines_of(read_all(f));
  std::fclose(f);
  EXPECT_EQ(l, (std::vector<std::string>{"load 1/1 [00:00<00:00, 4.00 it/s]", "denoise 1/4 [00:00<00:01, 2.00 it/s]",
                                         "denoise 2/4 [00:01<00:01, 2.00 it/s]", "denoise 3/4 [00:01<00:00, 2.00 it/s]",
                                         "denoise 4/4 [00:02<00:00, 2.00 it/s]", "warning: careful"}));
}

TEST(Progress, JsonLinesOnly) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressPrinter pr(ProgressMode::Json, f);
    feed(pr, 2);
    pr.message("warning", "bad \xff byte");  // invalid UTF-8 is replaced, not thrown
    pr.event({{"event", "done"}, {"images", nlohmann::ordered_json::array()}});
  }
  std::vector<std::string> l = lines_of(read_all(f));
  std::fclose(f);
  ASSERT_EQ(l.size(), 2u + 3u + 2u);
  std::vector<nlohmann::json> j;
  for (const std::string& s : l) j.push_back(nlohmann::json::parse(s));
  EXPECT_EQ(j[0], nlohmann::json::parse(R"({"event":"progress","phase":"load","step":0,"total":1,"elapsed_s":0.0})"));
  EXPECT_EQ(j[3]["phase"], "denoise");
  EXPECT_EQ(j[3]["step"], 1);
  EXPECT_EQ(j[3]["total"], 2);
  EXPECT_DOUBLE_EQ(j[3]["it_s"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j[3]["eta_s"].get<double>(), 0.5);
  EXPECT_EQ(j[5]["event"], "warning");
  EXPECT_EQ(j[6]["event"], "done");
}

TEST(Progress, JsonFields) {
  auto j = nlohmann::json::parse(ProgressPrinter::format_json({"decode", 1, 2, 0.5}, 2.0, 0.5));
  EXPECT_EQ(j["event"], "progress");
  EXPECT_EQ(j["phase"], "decode");
  EXPECT_EQ(j["step"], 1);
  EXPECT_EQ(j["total"], 2);
  EXPECT_DOUBLE_EQ(j["it_s"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["eta_s"].get<double>(), 0.5);
  EXPECT_FALSE(nlohmann::json::parse(ProgressPrinter::format_json({"load", 0, 4, 0}, 0, -1)).contains("eta_s"));
}

// The bar redraws at most every 100 ms of the (injected) clock, and always draws a phase's last step.
TEST(Progress, BarRedrawsAtMostEvery100ms) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  auto t = std::chrono::steady_clock::time_point{};
  {
    ProgressPrinter pr(ProgressMode::Bar, f, [&] { return t; });
    pr({"denoise", 0, 10, 0});  // drawn: the first
    for (int i = 1; i < 5; ++i) pr({"denoise", i, 10, 0.01 * i});  // same instant: skipped
    t += std::chrono::milliseconds(150);
    pr({"denoise", 5, 10, 0.15});  // drawn
    pr({"denoise", 10, 10, 0.16});  // drawn: the last
  }
  std::string s = read_all(f);
  std::fclose(f);
  EXPECT_EQ(std::count(s.begin(), s.end(), '\r'), 3) << s;
  EXPECT_NE(s.find(" 5/10 "), std::string::npos);
  EXPECT_EQ(s.find(" 4/10 "), std::string::npos);
  EXPECT_EQ(s.back(), '\n');  // finish ends the line
}

TEST(Progress, ModesParse) {
  EXPECT_EQ(parse_progress_mode("auto"), ProgressMode::Auto);
  EXPECT_EQ(parse_progress_mode("bar"), ProgressMode::Bar);
  EXPECT_EQ(parse_progress_mode("plain"), ProgressMode::Plain);
  EXPECT_EQ(parse_progress_mode("json"), ProgressMode::Json);
  EXPECT_EQ(parse_progress_mode("none"), ProgressMode::Quiet);
  EXPECT_THROW(parse_progress_mode("fancy"), Error);
}
