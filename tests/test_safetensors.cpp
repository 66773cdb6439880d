// safetensors loading: the fixture loads, and every kind of corruption gives a clear Error (these run
// under AddressSanitizer in CI).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "golden.h"
#include "io/checkpoint.h"
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
  // Contiguous (the reference library's rule): the data section 64-byte aligned in the (page-aligned) mapping,
  // each tensor at least aligned to its elements (a: 24 bytes, F32, first; b: 12 bytes, BF16, right after).
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f->data_section()) % 64, 0u);
  EXPECT_EQ(f->find("a")->begin, 0u);
  EXPECT_EQ(f->find("b")->begin, 24u);
  EXPECT_EQ(f->file_size(), 8 + f->header_size() + 36);
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

// ---- the header as the reference implementation reads it ------------------------------------------------

TEST(SafeTensors, DuplicateKeysAreRefused) {
  // nlohmann keeps the last of two equal keys silently; the reference refuses them.
  const std::string a = R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  expect_error(make_file("{" + a + "," + a + "}", 4), "names tensor 'a' twice");
  expect_error(make_file(R"({"__metadata__":{"k":"v"},"__metadata__":{"k":"w"}})", 0), "two __metadata__");
  expect_error(make_file(R"({"a":{"dtype":"F32","dtype":"I32","shape":[1],"data_offsets":[0,4]}})", 4),
               "entry 'a' has key 'dtype' twice");
  expect_error(make_file(R"({"__metadata__":{"k":"v","k":"w"}})", 0), "key 'k' twice");
  // Equal keys in different objects are fine.
  TempDir d;
  write_all(d.str() + "/ok.safetensors",
            make_file(R"({"__metadata__":{"dtype":"x"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                      R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                      8));
  EXPECT_EQ(SafeTensorsFile::open(d.str() + "/ok.safetensors")->tensors().size(), 2u);
}

TEST(SafeTensors, DuplicateDetectionStaysLinearOnALargeHeader) {
  std::string h = "{";
  const int n = 20000;
  for (int i = 0; i < n; ++i)
    h += "\"t" + std::to_string(i) + "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[" + std::to_string(i) + "," +
         std::to_string(i + 1) + "]},";
  TempDir d;
  write_all(d.str() + "/big.safetensors", make_file(h + R"("__metadata__":{"k":"v"}})", n));
  EXPECT_EQ(SafeTensorsFile::open(d.str() + "/big.safetensors")->tensors().size(), size_t(n));
  expect_error(make_file(h + R"("t12345":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})", n), "'t12345' twice");
}

TEST(SafeTensors, OnlySpacesMayFollowTheHeaderJson) {
  expect_error(make_file(std::string("{}\0garbage", 10), 0), "not space padding");
  expect_error(make_file("{} x", 0), "not space padding");
  expect_error(make_file(std::string("{}\0\0\0\0", 6), 0), "not space padding");
  expect_error(make_file(std::string("{\"a\":\0}", 7), 0), "NUL byte");
  // Space (and JSON whitespace) padding is what writers use.
  TempDir d;
  for (const std::string pad : {"", "   ", " \n\t\r "}) {
    write_all(d.str() + "/p.safetensors",
              make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})" + pad, 4));
    EXPECT_EQ(SafeTensorsFile::open(d.str() + "/p.safetensors")->tensors().size(), 1u) << "pad '" << pad << "'";
  }
  // A '}' inside a string does not end the object.
  write_all(d.str() + "/s.safetensors", make_file(R"({"__metadata__":{"k":"}\"}"}}   )", 0));
  EXPECT_EQ(SafeTensorsFile::open(d.str() + "/s.safetensors")->metadata().at("k"), "}\"}");
}

// ---- what is opened must be a regular file ----------------------------------------------------------------

TEST(SafeTensors, SpecialFilesFailAtOnce) {
  TempDir d;
  // A FIFO: a plain open() blocks until a writer appears. If it does, unblock it and fail.
  const std::string fifo = d.str() + "/fifo.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto res = std::async(std::launch::async, [&] { return test::error_of([&] { SafeTensorsFile::open(fifo); }); });
  if (res.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
    res.wait();
    FAIL() << "opening a FIFO blocked";
  }
  const std::string msg = res.get();
  EXPECT_NE(msg.find("FIFO"), std::string::npos) << msg;
  EXPECT_NE(msg.find(fifo), std::string::npos) << msg;

  test::expect_error([] { SafeTensorsFile::open("/dev/zero"); }, "/dev/zero: is a character device");
  test::expect_error([&] { SafeTensorsFile::open(d.str()); }, "is a folder, not a regular file");
  const std::string loop = d.str() + "/loop.safetensors";
  fs::create_symlink(loop, loop);
  test::expect_error([&] { SafeTensorsFile::open(loop); }, loop + ": cannot open");

  // Through a checkpoint folder and an index too: Errors, not std::filesystem_error.
  TempDir c;
  fs::create_symlink(c.str() + "/x.safetensors", c.str() + "/x.safetensors");
  test::expect_error([&] { Checkpoint::open_dir(c.str()); }, "x.safetensors: cannot open");
  TempDir e;
  ASSERT_EQ(::mkfifo((e.str() + "/m.safetensors.index.json").c_str(), 0600), 0);
  auto idx = std::async(std::launch::async, [&] { return test::error_of([&] { Checkpoint::open_dir(e.str()); }); });
  if (idx.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    const int w = ::open((e.str() + "/m.safetensors.index.json").c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
    idx.wait();
    FAIL() << "opening a FIFO index blocked";
  }
  EXPECT_NE(idx.get().find("not a regular file"), std::string::npos);
}

// ---- the data checksum ---------------------------------------------------------------------------------

TEST(SafeTensors, Xxh64MatchesTheReference) {
  auto h = [](const std::string& s) { return xxh64(s.data(), s.size()); };
  EXPECT_EQ(xxh64(nullptr, 0), 0xef46db3751d8e999ull);
  EXPECT_EQ(h("a"), 0xd24ec4f1a98c6e5bull);
  EXPECT_EQ(h("abc"), 0x44bc2cf5ad770999ull);
  EXPECT_EQ(h("foo"), 0x33bf00a859c4ba3full);
  EXPECT_EQ(h("abcdefghijklmnopqrstuvwxyz12345"), 0x467605901b01d6f6ull);       // 31 bytes: no stripes
  EXPECT_EQ(h("0123456789abcdefghijklmnopqrstuvwxyz"), 0x69196c1b3af0bff9ull);  // 36: one stripe + tail
  EXPECT_EQ(h("abcd"), 0xde0327b0d25d92ccull);
  EXPECT_EQ(h("abcdefgh"), 0x3ad351775b4634b7ull);
  EXPECT_EQ(xxh64(nullptr, 0, 668718853), 0x04e830582a31a119ull);
  std::string longer(1000, '\0');  // every stripe and tail length path: bytes i * 7 mod 251
  for (size_t i = 0; i < longer.size(); ++i) longer[i] = char(uint8_t(i * 7 % 251));
  EXPECT_EQ(h(longer), 0x023fd2ed1ff957d5ull);  // from a Python transcription of the spec
  EXPECT_EQ(h(longer.substr(0, 999)), 0x124351679f59c3f0ull);
}

TEST(SafeTensors, WrittenFilesCarryADataChecksum) {
  TempDir d;
  const std::string p = d.str() + "/c.safetensors";
  Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}), b = Tensor::from_vector({7}, {1});
  save_safetensors(p, {{"b", b}, {"a", a}}, {{"k", "v"}});
  auto f = SafeTensorsFile::open(p);
  EXPECT_EQ(f->metadata().at("k"), "v");
  const std::string sum = f->metadata().at(kDataChecksumKey);
  EXPECT_EQ(checksum_status(f->metadata()), ChecksumStatus::Unverified);
  // The documented definition: XXH64 over each tensor's XXH64 (little-endian), in name order.
  std::string cat;
  for (const Tensor* t : {&a, &b}) {
    const uint64_t h = xxh64(t->raw(), t->nbytes());
    for (int i = 0; i < 8; ++i) cat.push_back(char(uint8_t(h >> (8 * i))));
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(xxh64(cat.data(), cat.size())));
  EXPECT_EQ(sum, hex);
  ChecksumCheck c = verify_data_checksum(*f);
  EXPECT_EQ(c.status, ChecksumStatus::Ok) << c.stored << " vs " << c.computed;
  f.reset();

  // One flipped data byte: a mismatch.
  std::string bytes = read_all(p);
  bytes[bytes.size() - 1] ^= 1;
  write_all(p, bytes);
  c = verify_data_checksum(*SafeTensorsFile::open(p));
  EXPECT_EQ(c.status, ChecksumStatus::Mismatch);
  EXPECT_EQ(c.stored, sum);
  EXPECT_NE(c.computed, sum);

  // The placeholder (a writer that never finished): refused at open, "incomplete" when allowed.
  const size_t at = bytes.find(sum);
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 16, kDataChecksumPending);
  write_all(p, bytes);
  test::expect_error([&] { SafeTensorsFile::open(p); }, "incomplete file");
  EXPECT_EQ(verify_data_checksum(*SafeTensorsFile::open(p, true)).status, ChecksumStatus::Incomplete);

  // A file from another tool has none: nothing to check.
  write_all(p, make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4));
  EXPECT_EQ(verify_data_checksum(*SafeTensorsFile::open(p)).status, ChecksumStatus::None);
}

TEST(SafeTensors, ChecksumDoesNotDependOnWriterThreads) {
  TempDir d;
  std::vector<PendingTensor> ts;
  for (int i = 0; i < 30; ++i)
    ts.push_back({"t" + std::to_string(i), DType::F32, {int64_t(100 + i)}, [i] {
                    return test::rnd({int64_t(100 + i)}, uint32_t(i));
                  }});
  save_safetensors_streamed(d.str() + "/1.safetensors", ts, {}, 64, {}, 1);
  save_safetensors_streamed(d.str() + "/4.safetensors", ts, {}, 64, {}, 4);
  EXPECT_EQ(read_all(d.str() + "/1.safetensors"), read_all(d.str() + "/4.safetensors"));
  EXPECT_EQ(verify_data_checksum(*SafeTensorsFile::open(d.str() + "/4.safetensors"), 3).status, ChecksumStatus::Ok);
}
