#include "io/gguf.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/file.h"
#include "core/ggml_types.h"

namespace ernie {

namespace {

using std::to_string;

constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS

uint64_t le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Size of one stored scalar of type `t`; 0 for strings and arrays.
size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    default: return 0;
  }
}

// A bounds-checked reader over the file's bytes: every read says what it reads, so a truncated or lying file
// is named with the field and the offset.
struct Cursor {
  const uint8_t* p;
  size_t size, pos = 0;
  const std::string& what;

  size_t left() const { return size - pos; }
  void need(uint64_t n, const std::string& field) const {
    if (n > left())
      fail(what, ": truncated or corrupt GGUF: ", field, " needs ", to_string(n), " bytes at offset ", to_string(pos),
           " but the ", to_string(size), "-byte file has ", to_string(left()), " left");
  }
  uint64_t uint(int n, const std::string& field) {
    need(uint64_t(n), field);
    const uint64_t v = le(p + pos, n);
    pos += size_t(n);
    return v;
  }
  std::string_view bytes(uint64_t n, const std::string& field) {
    need(n, field);
    std::string_view v(reinterpret_cast<const char*>(p + pos), size_t(n));
    pos += size_t(n);
    return v;
  }
  std::string_view string(const std::string& field) {
    const uint64_t n = uint(8, field + "'s length");
    return bytes(n, field + " (" + to_string(n) + " bytes)");
  }
};

GgufType value_type(uint32_t id, const std::string& what, const std::string& key) {
  ERNIE_CHECK(id <= uint32_t(GgufType::F64), what, ": metadata '", key, "' has unknown value type ", to_string(id));
  return GgufType(id);
}

GgufValue read_value(Cursor& c, const std::string& key) {
  GgufValue v;
  v.type = value_type(uint32_t(c.uint(4, "the type of metadata '" + key + "'")), c.what, key);
  const std::string field = "metadata '" + key + "'";
  if (v.type == GgufType::STRING) {
    v.bytes = c.string(field);
  } else if (v.type != GgufType::ARRAY) {
    v.bytes = c.bytes(scalar_size(v.type), field);
  } else {
    v.elem = value_type(uint32_t(c.uint(4, field + "'s element type")), c.what, key);
    ERNIE_CHECK(v.elem != GgufType::ARRAY, c.what, ": metadata '", key, "' is an array of arrays (not supported)");
    v.count = c.uint(8, field + "'s element count");
    const size_t start = c.pos;
    if (v.elem == GgufType::STRING) {
      ERNIE_CHECK(v.count <= c.left() / 8, c.what, ": metadata '", key, "' claims ", to_string(v.count),
                  " strings, more than the ", to_string(c.left()), " bytes left could hold (corrupt file?)");
      for (uint64_t i = 0; i < v.count; ++i) c.string(field + "[" + to_string(i) + "]");
    } else {
      const size_t es = scalar_size(v.elem);
      ERNIE_CHECK(v.count <= c.left() / es, c.what, ": metadata '", key, "' claims ", to_string(v.count), " ",
                  gguf_type_name(v.elem), " values, more than the ", to_string(c.left()),
                  " bytes left could hold (corrupt file?)");
      c.pos += size_t(v.count) * es;
    }
    v.bytes = std::string_view(reinterpret_cast<const char*>(c.p + start), c.pos - start);
  }
  return v;
}

// Element i of a fixed-size array or one scalar, as a double / an integer.
double element_number(GgufType t, const uint8_t* p) {
  const uint64_t u = le(p, int(scalar_size(t)));
  switch (t) {
    case GgufType::F32: { uint32_t b = uint32_t(u); float f; std::memcpy(&f, &b, 4); return f; }
    case GgufType::F64: { double d; std::memcpy(&d, &u, 8); return d; }
    case GgufType::I8: return double(int8_t(u));
    case GgufType::I16: return double(int16_t(u));
    case GgufType::I32: return double(int32_t(u));
    case GgufType::I64: return double(int64_t(u));
    default: return double(u);
  }
}

int64_t element_integer(GgufType t, const uint8_t* p, const std::string& key) {
  const uint64_t u = le(p, int(scalar_size(t)));
  switch (t) {
    case GgufType::I8: return int8_t(u);
    case GgufType::I16: return int16_t(u);
    case GgufType::I32: return int32_t(u);
    case GgufType::I64: return int64_t(u);
    case GgufType::U64:
      ERNIE_CHECK(u <= uint64_t(std::numeric_limits<int64_t>::max()), "GGUF metadata '", key, "': ", to_string(u),
                  " is too large");
      return int64_t(u);
    default: return int64_t(u);  // U8, U16, U32, BOOL
  }
}

bool is_float(GgufType t) { return t == GgufType::F32 || t == GgufType::F64; }
bool is_int(GgufType t) { return scalar_size(t) > 0 && !is_float(t) && t != GgufType::BOOL; }

[[noreturn]] void wrong_type(const std::string& key, const GgufValue& v, const char* want) {
  fail("GGUF metadata '", key, "' is ", v.type == GgufType::ARRAY ? std::string("an array of ") + gguf_type_name(v.elem)
                                                                   : std::string("a ") + gguf_type_name(v.type),
       ", not ", want);
}

const uint8_t* u8(std::string_view s) { return reinterpret_cast<const uint8_t*>(s.data()); }

std::string supported_types() {
  std::string s;
  for (uint32_t id = 0; id < 64; ++id)
    if (const GgmlType* t = ggml_type(id); t && (t->plain || t->decode)) {
      if (!s.empty()) s += ' ';
      s += t->name;
    }
  return s;
}

// Reads one tensor info; `data_size` is not known yet (alignment may come from any KV), so spans are
// checked by the caller.
TensorInfo read_tensor_info(Cursor& c, size_t index) {
  TensorInfo ti;
  ti.file = c.what;
  ti.name = std::string(c.string("the name of tensor " + to_string(index)));
  const std::string who = c.what + ": tensor '" + ti.name + "'";
  const uint64_t nd = c.uint(4, "the dimension count of tensor '" + ti.name + "'");
  ERNIE_CHECK(nd >= 1 && nd <= kMaxDims, who, " has ", to_string(nd), " dimensions (GGUF allows 1 to 4)");
  uint64_t ne[kMaxDims];
  // The product of the non-zero dimensions must fit, so that no partial product in any order (shape_numel
  // multiplies outermost first) overflows, even when another dimension is 0.
  int64_t nonzero = 1, numel = 1;
  for (uint64_t d = 0; d < nd; ++d) {
    ne[d] = c.uint(8, "the dimensions of tensor '" + ti.name + "'");
    ERNIE_CHECK(ne[d] <= uint64_t(std::numeric_limits<int64_t>::max()), who, ": dimension ", to_string(d), " is ",
                to_string(ne[d]), " (negative or corrupt)");
    if (ne[d] == 0) {
      numel = 0;
      continue;
    }
    ERNIE_CHECK(nonzero <= std::numeric_limits<int64_t>::max() / int64_t(ne[d]), who,
                ": its element count overflows (corrupt dimensions)");
    nonzero *= int64_t(ne[d]);
  }
  if (numel) numel = nonzero;
  for (uint64_t d = nd; d-- > 0;) ti.shape.push_back(int64_t(ne[d]));  // torch order: innermost last
  const uint32_t type_id = uint32_t(c.uint(4, "the type of tensor '" + ti.name + "'"));
  const GgmlType* t = ggml_type(type_id);
  ERNIE_CHECK(t, who, " has unknown GGML type id ", to_string(type_id));
  ERNIE_CHECK(t->plain || t->decode, who, " is GGML type ", t->name, " (id ", to_string(type_id),
              "), which this build cannot read (it reads ", supported_types(), ")");
  ERNIE_CHECK(int64_t(ne[0]) % t->block == 0, who, ": its row length ", to_string(ne[0]), " is not a multiple of ",
              t->name, "'s block of ", to_string(t->block));
  const uint64_t blocks = uint64_t(numel / t->block);
  ERNIE_CHECK(blocks <= std::numeric_limits<uint64_t>::max() / t->block_bytes, who, ": its size overflows");
  const uint64_t off = c.uint(8, "the data offset of tensor '" + ti.name + "'");
  ti.ggml_type = int(type_id);
  ti.dtype = t->plain ? *t->plain : DType::F32;
  ti.begin = size_t(off);
  const uint64_t bytes = blocks * t->block_bytes;
  ERNIE_CHECK(off <= std::numeric_limits<uint64_t>::max() - bytes, who, ": its data offset overflows");
  ti.end = size_t(off + bytes);
  return ti;
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array",
                                "u64", "i64", "f64"};
  return uint32_t(t) <= uint32_t(GgufType::F64) ? names[uint32_t(t)] : "?";
}

bool GgufValue::is_integer() const { return is_int(type); }

std::string GgufValue::str(const std::string& key) const {
  if (type != GgufType::STRING) wrong_type(key, *this, "a string");
  return std::string(bytes);
}

int64_t GgufValue::integer(const std::string& key) const {
  if (!is_int(type)) wrong_type(key, *this, "an integer");
  return element_integer(type, u8(bytes), key);
}

double GgufValue::number(const std::string& key) const {
  if (!is_int(type) && !is_float(type)) wrong_type(key, *this, "a number");
  return element_number(type, u8(bytes));
}

bool GgufValue::boolean(const std::string& key) const {
  if (type != GgufType::BOOL) wrong_type(key, *this, "a bool");
  return bytes[0] != 0;
}

std::vector<std::string> GgufValue::strings(const std::string& key) const {
  if (type != GgufType::ARRAY || elem != GgufType::STRING) wrong_type(key, *this, "an array of strings");
  std::vector<std::string> out;
  out.reserve(size_t(count));
  const uint8_t* p = u8(bytes);
  for (uint64_t i = 0; i < count; ++i) {  // validated by the parser
    const size_t n = size_t(le(p, 8));
    out.emplace_back(reinterpret_cast<const char*>(p + 8), n);
    p += 8 + n;
  }
  return out;
}

std::vector<int64_t> GgufValue::integers(const std::string& key) const {
  if (type != GgufType::ARRAY || !(is_int(elem) || elem == GgufType::BOOL)) wrong_type(key, *this, "an array of integers");
  std::vector<int64_t> out(static_cast<size_t>(count));
  const size_t es = scalar_size(elem);
  for (size_t i = 0; i < out.size(); ++i) out[i] = element_integer(elem, u8(bytes) + i * es, key);
  return out;
}

std::vector<double> GgufValue::numbers(const std::string& key) const {
  if (type != GgufType::ARRAY || !(is_int(elem) || is_float(elem))) wrong_type(key, *this, "an array of numbers");
  std::vector<double> out(static_cast<size_t>(count));
  const size_t es = scalar_size(elem);
  for (size_t i = 0; i < out.size(); ++i) out[i] = element_number(elem, u8(bytes) + i * es);
  return out;
}

GgufHeader parse_gguf(const void* data, size_t size, const std::string& what) {
  Cursor c{static_cast<const uint8_t*>(data), size, 0, what};
  GgufHeader h;
  ERNIE_CHECK(size >= 4 && std::memcmp(data, "GGUF", 4) == 0, what, ": not a GGUF file (no 'GGUF' magic)");
  c.pos = 4;
  h.version = uint32_t(c.uint(4, "the version"));
  ERNIE_CHECK(h.version != 0x02000000u && h.version != 0x03000000u, what,
              ": a big-endian GGUF file (only little-endian GGUF is read)");
  ERNIE_CHECK(h.version != 1, what, ": GGUF version 1 (an early llama.cpp format) is not supported; convert it again");
  ERNIE_CHECK(h.version == 2 || h.version == 3, what, ": unsupported GGUF version ", to_string(h.version),
              " (versions 2 and 3 are read)");
  const uint64_t n_tensors = c.uint(8, "the tensor count");
  const uint64_t n_kv = c.uint(8, "the metadata count");
  // Lower bounds on what each entry takes: a KV at least 13 bytes (key length, type, a 1-byte value), a tensor
  // info 32 (name length, n_dims, one dimension, type, offset).
  ERNIE_CHECK(n_kv <= c.left() / 13, what, ": header claims ", to_string(n_kv), " metadata entries, more than the ",
              to_string(size), "-byte file could hold (corrupt file?)");
  ERNIE_CHECK(n_tensors <= c.left() / 32, what, ": header claims ", to_string(n_tensors),
              " tensors, more than the ", to_string(size), "-byte file could hold (corrupt file?)");
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key(c.string("the key of metadata entry " + to_string(i)));
    ERNIE_CHECK(!key.empty(), what, ": metadata entry ", to_string(i), " has an empty key");
    ERNIE_CHECK(!h.metadata.count(key), what, ": metadata key '", key, "' appears twice");
    GgufValue v = read_value(c, key);
    h.metadata.emplace(std::move(key), v);
  }
  if (auto it = h.metadata.find("general.alignment"); it != h.metadata.end()) {
    ERNIE_CHECK(it->second.type == GgufType::U32, what, ": general.alignment is ", gguf_type_name(it->second.type),
                ", not u32");
    const uint64_t a = uint64_t(it->second.integer(it->first));
    ERNIE_CHECK(a > 0 && (a & (a - 1)) == 0, what, ": general.alignment ", to_string(a), " is not a power of two");
    h.alignment = size_t(a);
  }
  h.tensors.reserve(size_t(n_tensors));
  std::map<std::string, size_t> seen;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo ti = read_tensor_info(c, size_t(i));
    ERNIE_CHECK(seen.emplace(ti.name, size_t(i)).second, what, ": tensor '", ti.name, "' appears twice");
    h.tensors.push_back(std::move(ti));
  }
  h.data_offset = c.pos + (h.alignment - c.pos % h.alignment) % h.alignment;
  const size_t data_size = h.data_offset <= size ? size - h.data_offset : 0;
  for (const TensorInfo& ti : h.tensors) {
    const std::string who = what + ": tensor '" + ti.name + "'";
    ERNIE_CHECK(ti.begin % h.alignment == 0, who, ": data offset ", to_string(ti.begin), " is not a multiple of the ",
                to_string(h.alignment), "-byte alignment");
    ERNIE_CHECK(h.data_offset <= size && ti.end <= data_size, who, ": its data (bytes ", to_string(ti.begin), " to ",
                to_string(ti.end), " of the data section at ", to_string(h.data_offset), ") runs past the end of the ",
                to_string(size), "-byte file (truncated?)");
  }
  std::vector<const TensorInfo*> by_off;
  for (const TensorInfo& t : h.tensors) by_off.push_back(&t);
  std::sort(by_off.begin(), by_off.end(), [](auto a, auto b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_off.size(); ++i)
    ERNIE_CHECK(by_off[i]->begin >= by_off[i - 1]->end || by_off[i]->begin == by_off[i]->end, what, ": tensors '",
                by_off[i - 1]->name, "' and '", by_off[i]->name, "' overlap in the file");
  return h;
}

Tensor gguf_tensor_copy(const GgufHeader& h, const TensorInfo& ti, const uint8_t* file) {
  const uint8_t* p = file + h.data_offset + ti.begin;
  Tensor out = Tensor::empty(ti.shape, ti.dtype);
  if (ti.ggml_type >= 0 && ggml_type(uint32_t(ti.ggml_type))->decode)
    ggml_decode(*ggml_type(uint32_t(ti.ggml_type)), p, out.f32(), out.numel());
  else if (out.nbytes() > 0)
    std::memcpy(out.raw(), p, out.nbytes());
  return out;
}

std::shared_ptr<GgufFile> GgufFile::open(const std::string& path) {
  size_t size = 0;
  const int fd = open_regular_file(path, &size);
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->size_ = size;
  if (size > 0) {
    void* m = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      fail(path, ": mmap failed (", std::strerror(e), ")");
    }
    f->base_ = static_cast<const uint8_t*>(m);
  }
  ::close(fd);
  static const uint8_t kEmpty[1] = {0};
  f->h_ = parse_gguf(f->base_ ? f->base_ : kEmpty, size, path);
  for (size_t i = 0; i < f->h_.tensors.size(); ++i) f->index_[f->h_.tensors[i].name] = i;
  f->self_ = f;
  return f;
}

GgufFile::~GgufFile() {
  if (base_) munmap(const_cast<uint8_t*>(base_), size_);
}

const TensorInfo* GgufFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &h_.tensors[it->second];
}

Tensor GgufFile::tensor(const std::string& name) const {
  const TensorInfo* ti = find(name);
  ERNIE_CHECK(ti, path_, ": no tensor named '", name, "'");
  const GgmlType* t = ggml_type(uint32_t(ti->ggml_type));
  const uint8_t* p = base_ + h_.data_offset + ti->begin;
  // Plain types are views, unless the file's alignment leaves them misaligned for their element type.
  if (t->plain && reinterpret_cast<uintptr_t>(p) % dtype_size(ti->dtype) == 0)
    return Tensor::borrow(p, ti->shape, ti->dtype, self_.lock());
  return gguf_tensor_copy(h_, *ti, base_);
}

Tensor GgufFile::stored_blocks(const std::string& name) const {
  const TensorInfo* ti = find(name);
  ERNIE_CHECK(ti, path_, ": no tensor named '", name, "'");
  const GgmlType* t = ggml_type(uint32_t(ti->ggml_type));
  if (!t->decode || ti->shape.size() != 2) return Tensor();
  const Shape raw = {ti->shape[0], ti->shape[1] / t->block * int64_t(t->block_bytes)};
  return Tensor::borrow(base_ + h_.data_offset + ti->begin, raw, DType::U8, self_.lock());
}

const GgufValue* GgufFile::meta(const std::string& key) const {
  auto it = h_.metadata.find(key);
  return it == h_.metadata.end() ? nullptr : &it->second;
}

std::optional<std::string> GgufFile::meta_string(const std::string& key) const {
  const GgufValue* v = meta(key);
  if (!v) return std::nullopt;
  return v->str(key);
}

}  // namespace ernie
