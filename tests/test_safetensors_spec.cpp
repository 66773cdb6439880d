// The files we write are valid for the reference safetensors library (io/safetensors_spec.h): spans contiguous
// from 0 to the end of the file, the data section 64-byte aligned, tensors aligned as the layout promises; old
// files with gaps still load, but safetensors_spec_problems and doctor report them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "doctor/doctor.h"
#include "golden.h"
#include "io/safetensors.h"
#include "io/safetensors_spec.h"

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
std::string with_length(const std::string& header) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((uint64_t(header.size()) >> (8 * i)) & 0xff);
  return s + header;
}
uint64_t header_length(const std::string& file) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(file[size_t(i)]);
  return n;
}

// Big and odd-sized tensors of every element size, each with distinct values.
std::vector<std::pair<std::string, Tensor>> mixed_tensors() {
  auto ramp = [](int64_t n, float scale) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(i % 97) * scale - 3.f;
    return v;
  };
  // Raw bytes (dtypes the host cast does not make): byte i is i * 37 + salt.
  auto raw = [](const Shape& shape, DType dt, int salt) {
    Tensor t = Tensor::empty(shape, dt);
    for (size_t i = 0; i < t.nbytes(); ++i) static_cast<uint8_t*>(t.raw())[i] = uint8_t(i * 37 + size_t(salt));
    return t;
  };
  return {
      {"big.f32", Tensor::from_vector(ramp(64 * 32, 0.5f), {64, 32})},
      {"odd.f32", Tensor::from_vector({1.5f, -2.f, 3.25f}, {3})},
      {"odd.bf16", Tensor::from_vector(ramp(5, 1.f), {5}).cast(DType::BF16)},
      {"one.i8", raw({1}, DType::I8, 5)},
      {"big.bf16", Tensor::from_vector(ramp(4096, 0.25f), {64, 64}).cast(DType::BF16)},
      {"odd.i64", raw({3}, DType::I64, 1)},
      {"empty.f32", Tensor::empty({0, 4}, DType::F32)},
      {"odd.f8", raw({7, 11}, DType::F8_E4M3, 3)},
      {"a.seven.f32", Tensor::from_vector(ramp(7, 2.f), {7})},
  };
}

std::string bytes_of(const Tensor& t) { return std::string(static_cast<const char*>(t.raw()), t.nbytes()); }

// What the reference reader checks, from the raw bytes; and the alignment our layout promises.
void expect_spec_clean_layout(const std::string& path, size_t align) {
  const std::string file = read_all(path);
  const uint64_t n = header_length(file);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ((8 + n) % align, 0u) << "data section starts at " << 8 + n;
  EXPECT_EQ(file[8], '{');
  const json h = json::parse(file.substr(8, n));
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const uint64_t b = it.value()["data_offsets"][0], e = it.value()["data_offsets"][1];
    const size_t elem = dtype_size(*dtype_from_name(it.value()["dtype"].get<std::string>()));
    EXPECT_EQ(b % elem, 0u) << it.key() << " at " << b;
    if ((e - b) % align == 0) {
      EXPECT_EQ(b % align, 0u) << it.key() << " at " << b;
    }
    spans.push_back({b, e});
  }
  std::sort(spans.begin(), spans.end());
  uint64_t at = 0;
  for (const auto& [b, e] : spans) {
    EXPECT_EQ(b, at) << "gap or overlap in " << path;
    at = e;
  }
  EXPECT_EQ(8 + n + at, file.size()) << "the data does not end at the end of the file";
  EXPECT_TRUE(safetensors_spec_problems(*SafeTensorsFile::open(path)).empty());
}

// The fixture's file rewritten as older versions wrote: every tensor 64-byte aligned, padding between.
void write_with_gaps(const std::string& from, const std::string& to) {
  auto f = SafeTensorsFile::open(from);
  std::vector<const TensorInfo*> ts;
  for (const TensorInfo& t : f->tensors()) ts.push_back(&t);
  std::sort(ts.begin(), ts.end(), [](auto a, auto b) { return a->name < b->name; });
  json h = {{"__metadata__", f->metadata()}};
  std::string data;
  for (const TensorInfo* t : ts) {
    data.resize((data.size() + 63) / 64 * 64, '\0');
    h[t->name] = {{"dtype", dtype_name(t->dtype)}, {"shape", t->shape}, {"data_offsets", {data.size(), data.size() + t->end - t->begin}}};
    data.append(reinterpret_cast<const char*>(f->data_section() + t->begin), t->end - t->begin);
  }
  std::string hs = h.dump();
  hs.append((64 - (8 + hs.size()) % 64) % 64, ' ');
  write_all(to, with_length(hs) + data);
}

bool any_contains(const std::vector<std::string>& v, const std::string& needle) {
  return std::any_of(v.begin(), v.end(), [&](const std::string& s) { return s.find(needle) != std::string::npos; });
}
std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += x + "\n";
  return s;
}

}  // namespace

TEST(SafeTensorsSpec, WrittenFilesAreContiguousAlignedAndReadBackExactly) {
  TempDir d;
  const auto ts = mixed_tensors();
  std::vector<PendingTensor> pending;
  for (const auto& [name, t] : ts) pending.push_back({name, t.dtype(), t.shape(), [t = t] { return t; }});
  struct Case {
    std::string file;
    size_t align;
    int threads;
  };
  for (const Case& c : {Case{"plain.safetensors", 64, 1}, Case{"threads.safetensors", 64, 4},
                        Case{"align8.safetensors", 8, 1}, Case{"align256.safetensors", 256, 2}}) {
    SCOPED_TRACE(c.file);
    const std::string p = d.str() + "/" + c.file;
    save_safetensors_streamed(p, pending, {{"k", "v"}}, c.align, {}, c.threads);
    expect_spec_clean_layout(p, c.align);
    auto f = SafeTensorsFile::open(p);
    ASSERT_EQ(f->tensors().size(), ts.size());
    for (const auto& [name, t] : ts) {
      const Tensor r = f->tensor(name);
      EXPECT_EQ(r.dtype(), t.dtype()) << name;
      EXPECT_EQ(r.shape(), t.shape()) << name;
      EXPECT_EQ(bytes_of(r), bytes_of(t)) << name;
      // Written aligned to its elements, so a view into the mapping (no copy).
      EXPECT_GE(static_cast<const uint8_t*>(r.raw()), f->data_section()) << name;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(r.raw()) % dtype_size(r.dtype()), 0u) << name;
    }
    EXPECT_EQ(f->metadata().at("k"), "v");
    EXPECT_EQ(verify_data_checksum(*f).status, ChecksumStatus::Ok);
  }
  // The layout does not depend on the writer's threads: same bytes.
  EXPECT_EQ(read_all(d.str() + "/plain.safetensors"), read_all(d.str() + "/threads.safetensors"));
}

TEST(SafeTensorsSpec, LayoutPutsAlignedSizesFirstThenByElementSize) {
  const std::vector<LayoutItem> items = {{"z.big", 128, 2}, {"b.odd_f32", 12, 4}, {"c.odd_bf16", 10, 2},
                                         {"a.one_i8", 1, 1}, {"y.big", 64, 4},    {"d.odd_i64", 24, 8}};
  const std::vector<size_t> offs = safetensors_data_layout(items, 64);
  // y.big, z.big (name order), then d.odd_i64 (8), b.odd_f32 (4), c.odd_bf16 (2), a.one_i8 (1).
  EXPECT_EQ(offs, (std::vector<size_t>{64, 216, 228, 238, 0, 192}));
  test::expect_error([] { safetensors_data_layout({}, 48); }, "not a power of two from 8 to 4096");
  test::expect_error([] { safetensors_data_layout({}, 4); }, "not a power of two from 8 to 4096");
}

TEST(SafeTensorsSpec, ChecksumPlaceholderRewriteKeepsTheHeaderSize) {
  TempDir d;
  const std::string p = d.str() + "/c.safetensors";
  save_safetensors(p, mixed_tensors());
  const std::string file = read_all(p);
  const uint64_t n = header_length(file);
  const json h = json::parse(file.substr(8, n));
  const std::string sum = h["__metadata__"][kDataChecksumKey];
  EXPECT_EQ(sum.size(), std::string(kDataChecksumPending).size());
  EXPECT_NE(sum, kDataChecksumPending);
  // Damage one byte of the last tensor in the file: the checksum tells.
  std::string bad = file;
  bad[bad.size() - 1] ^= 0x5a;
  write_all(p, bad);
  EXPECT_EQ(verify_data_checksum(*SafeTensorsFile::open(p)).status, ChecksumStatus::Mismatch);
}

TEST(SafeTensorsSpec, GapsAndTrailingBytesLoadButAreReported) {
  TempDir d;
  const std::string p = d.str() + "/gaps.safetensors";
  // Two F32 [2] tensors 64 bytes apart, as older versions wrote them.
  std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[64,72]}})";
  h.append((64 - (8 + h.size()) % 64) % 64, ' ');
  std::string data(72, '\0');
  const float a[2] = {1.f, 2.f}, b[2] = {3.f, 4.f};
  std::memcpy(data.data(), a, 8);
  std::memcpy(data.data() + 64, b, 8);
  write_all(p, with_length(h) + data);
  auto f = SafeTensorsFile::open(p);  // still read
  EXPECT_EQ(f->tensor("b").to_vector(), (std::vector<float>{3.f, 4.f}));
  std::vector<std::string> probs = safetensors_spec_problems(*f);
  ASSERT_EQ(probs.size(), 1u) << joined(probs);
  EXPECT_NE(probs[0].find(p), std::string::npos) << probs[0];
  EXPECT_NE(probs[0].find("1 gap(s) between tensor spans, 56 bytes"), std::string::npos) << probs[0];
  EXPECT_NE(probs[0].find("'a' ends at 8, 'b' begins at 64"), std::string::npos) << probs[0];
  EXPECT_NE(probs[0].find("reference safetensors library refuses"), std::string::npos) << probs[0];

  // Spans that do not start at 0, bytes after the last one, a header of odd length starting with a space.
  const std::string q = d.str() + "/odd.safetensors";
  const std::string h2 = R"( {"a":{"dtype":"I8","shape":[3],"data_offsets":[2,5]}})";
  write_all(q, with_length(h2) + std::string(9, '\0'));
  probs = safetensors_spec_problems(*SafeTensorsFile::open(q));
  EXPECT_TRUE(any_contains(probs, "does not start with '{'")) << joined(probs);
  EXPECT_TRUE(any_contains(probs, "not a multiple of 8")) << joined(probs);
  EXPECT_TRUE(any_contains(probs, "the first tensor, 'a', begins at 2, not 0")) << joined(probs);
  EXPECT_TRUE(any_contains(probs, "4 byte(s) after the last tensor's data")) << joined(probs);
  EXPECT_EQ(probs.size(), 4u) << joined(probs);

  // The fixture (written by the reference library) is clean.
  EXPECT_TRUE(safetensors_spec_problems(
                  *SafeTensorsFile::open(test::tiny_model() + "/transformer/diffusion_pytorch_model.safetensors"))
                  .empty());
}

// A foreign file may put an F32 at an odd offset: read as a copy, never a misaligned view.
TEST(SafeTensorsSpec, MisalignedTensorIsCopied) {
  TempDir d;
  const std::string p = d.str() + "/mis.safetensors";
  std::string h = R"({"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"F32","shape":[2],"data_offsets":[1,9]}})";
  h.append((64 - (8 + h.size()) % 64) % 64, ' ');
  std::string data(9, '\0');
  const float b[2] = {-1.5f, 8.f};
  std::memcpy(data.data() + 1, b, 8);
  write_all(p, with_length(h) + data);
  auto f = SafeTensorsFile::open(p);
  EXPECT_TRUE(safetensors_spec_problems(*f).empty()) << joined(safetensors_spec_problems(*f));
  const Tensor t = f->tensor("b");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 4, 0u);
  EXPECT_EQ(t.to_vector(), (std::vector<float>{-1.5f, 8.f}));
}

TEST(SafeTensorsSpec, DoctorWarnsAboutGapsButStillPasses) {
  TempDir d;
  const std::string dir = d.str() + "/model";
  fs::copy(test::tiny_model(), dir, fs::copy_options::recursive);
  auto spec_warnings = [](const DoctorReport& r) {
    std::vector<std::string> v;
    for (const json& w : r.json["warnings"])
      if (w.get<std::string>().find("reference safetensors library") != std::string::npos) v.push_back(w);
    return v;
  };
  DoctorReport clean = run_doctor(dir);
  EXPECT_EQ(clean.problems, 0) << clean.json.dump(2);
  EXPECT_TRUE(spec_warnings(clean).empty()) << clean.json.dump(2);

  const std::string vae = dir + "/vae/diffusion_pytorch_model.safetensors";
  write_with_gaps(test::tiny_model() + "/vae/diffusion_pytorch_model.safetensors", vae);
  DoctorReport r = run_doctor(dir);
  EXPECT_EQ(r.problems, 0) << r.json.dump(2);  // still read: a warning, not a problem
  const std::vector<std::string> ws = spec_warnings(r);
  ASSERT_EQ(ws.size(), 1u) << r.json.dump(2);
  const std::string& w = ws[0];
  EXPECT_NE(w.find(vae), std::string::npos) << w;
  EXPECT_NE(w.find("gap(s) between tensor spans"), std::string::npos) << w;
  EXPECT_NE(format_doctor(r.json).find("warning: " + w), std::string::npos);
}
