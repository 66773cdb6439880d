// The tuning cache: choices survive a new process (a new Cache on the same directory), belong to one
// identity, and a damaged or unwritable file never turns into an error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "golden.h"
#include "ops/tuning_cache.h"

namespace ernie::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TEST(TuningCache, StoredChoicesSurviveANewProcess) {
  TempDir dir;
  {
    tuning::Cache c("GPU X cc9.0 cublasLt 1", dir.str());
    EXPECT_FALSE(c.find("gemm 1 2 3").has_value());
    c.store("gemm 1 2 3", {{"algo", {1, 2, 3}}});
    c.store("conv 4", {{"algo", 5}});
    ASSERT_TRUE(fs::exists(c.path()));
  }
  tuning::Cache again("GPU X cc9.0 cublasLt 1", dir.str());
  ASSERT_TRUE(again.find("gemm 1 2 3").has_value());
  EXPECT_EQ((*again.find("gemm 1 2 3"))["algo"], json({1, 2, 3}));
  EXPECT_EQ((*again.find("conv 4"))["algo"], 5);
  // Another GPU or library version has its own file and sees nothing of this one.
  tuning::Cache other("GPU Y cc8.0 cublasLt 1", dir.str());
  EXPECT_NE(other.path(), again.path());
  EXPECT_FALSE(other.find("gemm 1 2 3").has_value());
}

TEST(TuningCache, DamagedFileIsIgnoredAndReplaced) {
  TempDir dir;
  std::string path;
  {
    tuning::Cache c("GPU Z", dir.str());
    c.store("k", 1);
    path = c.path();
  }
  std::ofstream(path, std::ios::trunc) << "{\"identity\": \"GPU Z\", \"entries\": {\"k\": 1";  // truncated
  tuning::Cache c("GPU Z", dir.str());
  EXPECT_FALSE(c.find("k").has_value());
  c.store("k2", 2);
  tuning::Cache again("GPU Z", dir.str());
  EXPECT_EQ(*again.find("k2"), 2);
}

TEST(TuningCache, UnwritableDirectoryIsNotAnError) {
  TempDir dir;
  const std::string blocked = dir.str() + "/file-not-dir";
  std::ofstream(blocked) << "x";
  tuning::Cache c("GPU W", blocked);  // the directory is a file: nothing can be written under it
  EXPECT_NO_THROW(c.store("k", 1));
  EXPECT_EQ(*c.find("k"), 1);  // still remembered in memory
}

TEST(TuningCache, ReportListsFiles) {
  TempDir dir;
  setenv("ERNIE_CACHE_DIR", dir.str().c_str(), 1);
  {
    tuning::Cache c("GPU R", dir.str());
    c.store("a", 1);
    c.store("b", 2);
  }
  std::ofstream(dir.str() + "/tuning-broken.json") << "not json";
  const json r = tuning::report();
  unsetenv("ERNIE_CACHE_DIR");
  EXPECT_EQ(r["dir"], dir.str());
  ASSERT_EQ(r["files"].size(), 2u);
  int good = 0, broken = 0;
  for (const json& f : r["files"]) {
    if (f.contains("error")) ++broken;
    else if (f["entries"] == 2 && f["identity"] == "GPU R") ++good;
  }
  EXPECT_EQ(good, 1);
  EXPECT_EQ(broken, 1);
}

}  // namespace
}  // namespace ernie::test
