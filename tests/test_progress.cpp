// Progress formatting: the terminal bar and the JSON lines.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/progress.h"

using namespace ernie;

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

TEST(Progress, JsonLines) {
  auto j = nlohmann::json::parse(ProgressPrinter::format_json({"decode", 1, 2, 0.5}, 2.0, 0.5));
  EXPECT_EQ(j["phase"], "decode");
  EXPECT_EQ(j["step"], 1);
  EXPECT_EQ(j["total"], 2);
  EXPECT_DOUBLE_EQ(j["it_per_s"].get<double>(), 2.0);
  EXPECT_FALSE(nlohmann::json::parse(ProgressPrinter::format_json({"load", 0, 4, 0}, 0, -1)).contains("eta_s"));
}

TEST(Progress, ModesParse) {
  EXPECT_EQ(parse_progress_mode("json"), ProgressMode::Json);
  EXPECT_EQ(parse_progress_mode("bar"), ProgressMode::Bar);
  EXPECT_THROW(parse_progress_mode("fancy"), Error);
}
