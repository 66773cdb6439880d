#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.h"

namespace ernie {

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

Device Device::parse(const std::string& s) {
  if (s == "cpu") return kCPU;
  if (s == "cuda") return {DeviceKind::CUDA, 0};
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5 && s.size() < 9 &&
      s.find_first_not_of("0123456789", 5) == std::string::npos)
    return {DeviceKind::CUDA, std::stoi(s.substr(5))};
  fail("unknown device '", s, "' (expected cpu, cuda or cuda:N)");
}

namespace {
DeviceMemoryOps g_ops;
}
void set_device_memory_ops(const DeviceMemoryOps& ops) { g_ops = ops; }
const DeviceMemoryOps& device_memory_ops() { return g_ops; }

Storage::~Storage() {
  if (deleter && ptr) deleter(ptr);
}

static std::shared_ptr<Storage> allocate(size_t bytes, Device device) {
  auto st = std::make_shared<Storage>();
  st->bytes = bytes;
  st->device = device;
  if (device.is_cpu()) {
    st->ptr = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    if (!st->ptr) throw OutOfMemory("out of host memory allocating " + std::to_string(bytes) + " bytes");
    st->deleter = [](void* p) { std::free(p); };
  } else {
    ERNIE_CHECK(g_ops.alloc, "this build has no CUDA support (device ", device.str(), ")");
    st->ptr = g_ops.alloc(bytes, device.index);
    int idx = device.index;
    st->deleter = [idx](void* p) { g_ops.free(p, idx); };
  }
  return st;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) ERNIE_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = shape;
  t.storage_ = allocate(t.nbytes(), device);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (device.is_cpu()) std::memset(t.raw(), 0, t.nbytes());
  else g_ops.zero(t.raw(), t.nbytes(), device.index);
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& v, const Shape& shape) {
  ERNIE_CHECK(int64_t(v.size()) == shape_numel(shape), "from_vector: ", std::to_string(v.size()),
              " values do not fill shape ", shape_str(shape));
  Tensor t = empty(shape, DType::F32);
  std::memcpy(t.raw(), v.data(), v.size() * 4);
  return t;
}

Tensor Tensor::borrow(const void* data, const Shape& shape, DType dtype, std::shared_ptr<const void> owner,
                      Device device) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = shape;
  t.storage_ = std::make_shared<Storage>();
  t.storage_->ptr = const_cast<void*>(data);
  t.storage_->bytes = t.nbytes();
  t.storage_->device = device;
  t.storage_->owner = std::move(owner);
  return t;
}

float* Tensor::f32() const {
  ERNIE_CHECK(dtype_ == DType::F32 && device().is_cpu(), "expected an F32 CPU tensor, got ",
              dtype_name(dtype_), " on ", device().str());
  return data<float>();
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape s = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      ERNIE_CHECK(infer < 0, "reshape: more than one -1 in ", shape_str(shape));
      infer = int64_t(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) s[infer] = known ? numel() / known : 0;
  ERNIE_CHECK(shape_numel(s) == numel(), "reshape: cannot view ", shape_str(shape_), " as ", shape_str(shape));
  Tensor t = *this;
  t.shape_ = s;
  return t;
}

Tensor Tensor::narrow(int64_t start, int64_t length) const {
  ERNIE_CHECK(ndim() >= 1 && start >= 0 && length >= 0 && start + length <= shape_[0], "narrow: rows [",
              std::to_string(start), ", ", std::to_string(start + length), ") outside ", shape_str(shape_));
  Tensor t = *this;
  t.shape_[0] = length;
  t.offset_ += size_t(start) * (shape_[0] ? nbytes() / size_t(shape_[0]) : 0);
  return t;
}

Tensor Tensor::narrow_seq(int64_t start, int64_t length) const {
  ERNIE_CHECK(ndim() >= 2 && shape_[0] == 1, "narrow_seq: ", shape_str(shape_), " is not one sequence [1, S, ...]");
  Shape rows(shape_.begin() + 1, shape_.end());
  Tensor t = reshape(rows).narrow(start, length);
  t.shape_.insert(t.shape_.begin(), 1);
  return t;
}

Tensor Tensor::to(Device d) const {
  if (d == device()) return *this;
  Tensor t = empty(shape_, dtype_, d);
  ERNIE_CHECK(g_ops.copy, "this build has no CUDA support");
  g_ops.copy(t.raw(), d, raw(), device(), nbytes());
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device());
  if (device().is_cpu()) std::memcpy(t.raw(), raw(), nbytes());
  else g_ops.copy(t.raw(), device(), raw(), device(), nbytes());
  return t;
}

Tensor Tensor::to_f32() const { return dtype_ == DType::F32 ? *this : cast(DType::F32); }

Tensor Tensor::cast(DType dtype) const {
  ERNIE_CHECK(device().is_cpu(), "cast: tensor on ", device().str(), " (use the backend's cast)");
  if (dtype == dtype_) return *this;
  Tensor t = empty(shape_, dtype);
  if (dtype == DType::F32) {
    convert_to_f32(dtype_, raw(), t.data<float>(), size_t(numel()));
  } else {
    Tensor f = to_f32();
    convert_from_f32(dtype, f.data<float>(), t.raw(), size_t(numel()));
  }
  return t;
}

std::vector<float> Tensor::to_vector() const {
  Tensor c = device().is_cpu() ? *this : to(kCPU);
  std::vector<float> v(size_t(c.numel()));
  if (c.dtype_ == DType::I64) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(c.data<int64_t>()[i]);
  } else if (c.dtype_ == DType::I32) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(c.data<int32_t>()[i]);
  } else {
    convert_to_f32(c.dtype_, c.raw(), v.data(), v.size());
  }
  return v;
}

}  // namespace ernie
