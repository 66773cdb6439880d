// Tensor: a contiguous, row-major n-d array on a device, sharing its storage (an allocation or an
// mmap'd checkpoint span) through a reference count. Views (reshape, narrow along dim 0) are free.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace ernie {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "[2, 32, 6, 5]"
int64_t shape_numel(const Shape& s);

enum class DeviceKind : uint8_t { CPU, CUDA };
struct Device {
  DeviceKind kind = DeviceKind::CPU;
  int index = 0;
  bool operator==(const Device&) const = default;
  bool is_cpu() const { return kind == DeviceKind::CPU; }
  bool is_cuda() const { return kind == DeviceKind::CUDA; }
  std::string str() const;  // "cpu", "cuda:0"
  static Device parse(const std::string& s);  // "cpu", "cuda", "cuda:1"; throws on anything else
};
inline const Device kCPU{};

struct Storage {
  void* ptr = nullptr;
  size_t bytes = 0;
  Device device;
  std::function<void(void*)> deleter;  // empty for borrowed memory
  std::shared_ptr<const void> owner;   // keeps an mmap or parent alive
  ~Storage();
};

// Device memory hooks; the CUDA backend installs them at start-up.
struct DeviceMemoryOps {
  void* (*alloc)(size_t bytes, int device) = nullptr;  // throws OutOfMemory
  void (*free)(void* p, int device) = nullptr;
  void (*copy)(void* dst, Device dd, const void* src, Device sd, size_t bytes) = nullptr;
  void (*zero)(void* p, size_t bytes, int device) = nullptr;
};
void set_device_memory_ops(const DeviceMemoryOps& ops);
const DeviceMemoryOps& device_memory_ops();

class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(const Shape& shape, DType dtype, Device device = kCPU);
  static Tensor zeros(const Shape& shape, DType dtype, Device device = kCPU);
  static Tensor from_vector(const std::vector<float>& v, const Shape& shape);  // F32 on CPU
  // Borrow memory owned elsewhere (an mmap); `owner` keeps it alive for as long as the tensor lives.
  static Tensor borrow(const void* data, const Shape& shape, DType dtype, std::shared_ptr<const void> owner,
                       Device device = kCPU);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device : kCPU; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return int(shape_.size()); }
  int64_t dim(int i) const { return shape_.at(i < 0 ? i + ndim() : i); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }

  void* raw() const { return static_cast<char*>(storage_->ptr) + offset_; }
  template <class T> T* data() const { return static_cast<T*>(raw()); }
  float* f32() const;  // checks dtype F32 and CPU

  Tensor reshape(const Shape& shape) const;                 // same numel; one -1 allowed
  Tensor narrow(int64_t start, int64_t length) const;       // rows [start, start+length) of dim 0
  Tensor narrow_seq(int64_t start, int64_t length) const;   // [1, S, ...]: positions [start, start+length) of dim 1
  Tensor to(Device device) const;                           // copy across devices (or self)
  Tensor to_f32() const;                                    // CPU: any float dtype -> F32 copy (or self)
  Tensor cast(DType dtype) const;                           // CPU: float conversions
  Tensor clone() const;
  std::vector<float> to_vector() const;                     // any float tensor, any device

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
  DType dtype_ = DType::F32;
  Shape shape_;
};

}  // namespace ernie
