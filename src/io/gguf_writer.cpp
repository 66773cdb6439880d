#include "io/gguf_writer.h"

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/ggml_types.h"

namespace ernie {

namespace {

constexpr size_t kAlign = 32;  // GGUF's default general.alignment
constexpr uint32_t kString = 8, kU32 = 4;

struct Out {
  AtomicFile& f;
  size_t at = 0;
  void raw(const void* p, size_t n) {
    f.write(p, n);
    at += n;
  }
  void u32(uint32_t v) { raw(&v, 4); }  // the host is little-endian (x86-64, aarch64)
  void u64(uint64_t v) { raw(&v, 8); }
  void str(const std::string& s) {
    u64(s.size());
    raw(s.data(), s.size());
  }
  void pad() {
    static const char zeros[kAlign] = {};
    raw(zeros, (kAlign - at % kAlign) % kAlign);
  }
};

size_t aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

size_t ggml_nbytes(int type, const Shape& shape, const std::string& name) {
  const GgmlType* t = ggml_type(uint32_t(type));
  ERNIE_CHECK(t && (t->plain || t->decode), "GGUF: ", name, ": no GGML type ", std::to_string(type));
  ERNIE_CHECK(!shape.empty() && shape.back() % t->block == 0, "GGUF: ", name, " ", shape_str(shape), ": rows are not ",
              "whole ", t->name, " blocks of ", std::to_string(t->block));
  return size_t(shape_numel(shape) / t->block) * t->block_bytes;
}

void write_gguf(const std::string& path, const std::vector<std::pair<std::string, GgufMetaValue>>& metadata,
                const std::vector<GgufOutTensor>& tensors, const std::function<void(size_t, size_t)>& progress,
                const std::vector<std::string>& inputs) {
  AtomicFile file(path, inputs);  // removes its temp file on any error
  Out o{file};
  {
    o.raw("GGUF", 4);
    o.u32(3);
    o.u64(tensors.size());
    o.u64(metadata.size());
    for (const auto& [key, value] : metadata) {
      o.str(key);
      if (const auto* s = std::get_if<std::string>(&value)) {
        o.u32(kString);
        o.str(*s);
      } else {
        o.u32(kU32);
        o.u32(std::get<uint32_t>(value));
      }
    }
    size_t offset = 0, total = 0;
    std::vector<size_t> sizes;
    for (const GgufOutTensor& t : tensors) {
      sizes.push_back(ggml_nbytes(t.type, t.shape, t.name));
      o.str(t.name);
      o.u32(uint32_t(t.shape.size()));
      for (size_t d = t.shape.size(); d-- > 0;) o.u64(uint64_t(t.shape[d]));  // ne: innermost first
      o.u32(uint32_t(t.type));
      o.u64(offset);
      offset = aligned(offset + sizes.back());
      total += sizes.back();
    }
    o.pad();
    size_t done = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const std::vector<uint8_t> b = tensors[i].bytes();
      ERNIE_CHECK(b.size() == sizes[i], "GGUF: ", tensors[i].name, " made ", std::to_string(b.size()), " bytes, expected ",
                  std::to_string(sizes[i]));
      o.raw(b.data(), b.size());
      o.pad();
      done += b.size();
      if (progress) progress(done, total);
    }
  }
  file.commit();
}

}  // namespace ernie
