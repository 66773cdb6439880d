// safetensors loading: the fixture loads, and every kind of corruption gives a clear Error (these run
// under AddressSanitizer in CI).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "golden.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;
using namespace ernie;
using ernie::test::TempDir;
using json = nlohmann::json;

namespace {

std::string read_all(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
void write_all(const std::string& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary);
  out << s;
}
// A file made of a header (as given) and a data section of `data_bytes` zeros.
std::string make_file(const std::string& header, size_t data_bytes) {
  std::string s(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) s[i] = char((n >> (8 * i)) & 0xff);
  return s + header + std::string(data_bytes, '\0');
}
// Expects opening `contents` to throw an Error whose message contains `needle`.
void expect_error(const std::string& contents, const std::string& needle) {
  TempDir d;
  std::string p = d.str() + "/x.safetensors";
  write_all(p, contents);
  try {
    SafeTensorsFile::open(p);
    FAIL() << "no error; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "message should name the file: " << e.what();
  }
}

}  // namespace

TEST(SafeTensors, FixtureLoadsLazily) {
  auto f = SafeTensorsFile::open(test::tiny_model() + "/transformer/diffusion_pytorch_model.safetensors");
  const TensorInfo* ti = f->find("text_proj.weight");
  ASSERT_NE(ti, nullptr);
  EXPECT_EQ(ti->dtype, DType::BF16);
  EXPECT_EQ(ti->shape, (Shape{64, 48}));
  Tensor t = f->tensor("text_proj.weight");
  EXPECT_EQ(t.numel(), 64 * 48);
  // A view into the mapping, not a copy: the data pointer lies inside the file's data section.
  EXPECT_GE(static_cast<const uint8_t*>(t.raw()), f->data_section());
  EXPECT_LT(static_cast<const uint8_t*>(t.raw()), f->data_section() + f->file_size());
  auto v = t.to_vector();
  double sum = 0;
  for (float x : v) sum += std::fabs(x);
  EXPECT_GT(sum, 0);
}

TEST(SafeTensors, RoundTripWriter) {
  TempDir d;
  std::string p = d.str() + "/rt.safetensors";
  Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = a.cast(DType::BF16);
  save_safetensors(p, {{"a", a}, {"b", b}}, {{"k", "v"}});
  auto f = SafeTensorsFile::open(p);
  EXPECT_EQ(f->metadata().at("k"), "v");
  EXPECT_EQ(f->tensor("a").to_vector(), a.to_vector());
  EXPECT_EQ(f->tensor("b").to_vector(), a.to_vector());
  for (const auto& ti : f->tensors())  // aligned from the start of the (page-aligned) mapping
    EXPECT_EQ(reinterpret_cast<uintptr_t>(f->data_section() + ti.begin) % 64, 0u) << ti.name;
}

TEST(SafeTensors, TruncatedFile) {
  std::string full = read_all(test::tiny_model() + "/transformer/diffusion_pytorch_model.safetensors");
  expect_error(full.substr(0, full.size() - 100), "outside the file");
  expect_error(full.substr(0, 5), "too short");
}

TEST(SafeTensors, HeaderLengthBeyondFile) {
  std::string s = make_file("{}", 0);
  s[0] = char(0xff);
  s[1] = char(0x10);  // 4351 bytes of header in a 10-byte file
  expect_error(s, "past the end");
  std::string huge(8, char(0xff));
  expect_error(huge + "{}", "100 MB");
}

TEST(SafeTensors, GarbageHeaderJson) {
  expect_error(make_file("{\"a\": [1, 2", 0), "not valid JSON");
  expect_error(make_file("[1, 2, 3]", 0), "not a JSON object");
}

TEST(SafeTensors, SpanOutsideFile) {
  expect_error(make_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8), "outside the file");
}

TEST(SafeTensors, OverlappingSpans) {
  expect_error(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                         16),
               "overlap");
}

TEST(SafeTensors, UnknownDtype) {
  expect_error(make_file(R"({"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})", 16), "unknown dtype");
}

TEST(SafeTensors, ShapeDoesNotMatchSpan) {
  expect_error(make_file(R"({"a":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})", 8), "needs 6 bytes");
  expect_error(make_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4), "non-negative");
  expect_error(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8), "begin");
}

TEST(SafeTensors, AllDtypesParse) {
  std::string h = "{";
  size_t off = 0;
  const char* names[] = {"F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "I8", "I32", "I64", "U8", "BOOL"};
  for (const char* n : names) {
    size_t sz = dtype_size(*dtype_from_name(n)) * 2;
    h += std::string(off ? "," : "") + "\"" + n + "\":{\"dtype\":\"" + n + "\",\"shape\":[2],\"data_offsets\":[" +
         std::to_string(off) + "," + std::to_string(off + sz) + "]}";
    off += sz;
  }
  h += "}";
  TempDir d;
  write_all(d.str() + "/x.safetensors", make_file(h, off));
  auto f = SafeTensorsFile::open(d.str() + "/x.safetensors");
  EXPECT_EQ(f->tensors().size(), 10u);
}

TEST(SafeTensors, ShardedIndex) {
  TempDir d;
  Tensor a = Tensor::from_vector({1, 2}, {2}), b = Tensor::from_vector({3, 4, 5}, {3});
  save_safetensors(d.str() + "/m-00001-of-00002.safetensors", {{"a", a}});
  save_safetensors(d.str() + "/m-00002-of-00002.safetensors", {{"b", b}});
  json idx = {{"metadata", {{"total_size", 20}}},
              {"weight_map", {{"a", "m-00001-of-00002.safetensors"}, {"b", "m-00002-of-00002.safetensors"}}}};
  write_all(d.str() + "/m.safetensors.index.json", idx.dump());
  Checkpoint c = Checkpoint::open_dir(d.str());
  EXPECT_EQ(c.tensor("b").to_vector(), b.to_vector());
  EXPECT_EQ(c.files().size(), 2u);

  // A shard named in the index but missing.
  fs::remove(d.str() + "/m-00002-of-00002.safetensors");
  try {
    Checkpoint::open_dir(d.str());
    FAIL() << "missing shard not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("named in the index but missing"), std::string::npos) << e.what();
  }
}
