// Weight streaming on CUDA: page-locked host buffers, a copy stream per device (next to the compute stream
// of device.cpp that every op runs on), and events that order the two streams.
#include <cuda_runtime.h>

#include <mutex>

#include "ops/cuda/common.h"
#include "ops/cuda/cuda_ops.h"

namespace ernie::cuda {
namespace {

constexpr int kMaxDevices = 16;

cudaStream_t copy_stream(int device) {
  static std::mutex mu;
  static cudaStream_t streams[kMaxDevices] = {};
  ERNIE_CHECK(device >= 0 && device < kMaxDevices, "CUDA device index ", std::to_string(device), " out of range");
  stream(device);  // initialises the device and makes it current
  std::lock_guard<std::mutex> lk(mu);
  if (!streams[device]) ERNIE_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[device], cudaStreamNonBlocking));
  return streams[device];
}

cudaStream_t pick(int device, bool copy) { return copy ? copy_stream(device) : stream(device); }

}  // namespace

void* pinned_alloc(size_t bytes, int device) {
  stream(device);  // a context on the device the memory is for
  void* p = nullptr;
  cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw OutOfMemory("cannot page-lock " + std::to_string(bytes >> 20) + " MiB of host memory for weight streaming (" +
                      cudaGetErrorString(e) + "); free host memory or run without --offload blocks");
  }
  return p;
}

void pinned_free(void* p) {
  if (p) cudaFreeHost(p);
}

void upload_async(void* dst, const void* src, size_t bytes, int device) {
  if (bytes) ERNIE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, copy_stream(device)));
}

void download_async(void* dst, const void* src, size_t bytes, int device) {
  if (bytes) ERNIE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream(device)));
}

void* event_create(int device) {
  stream(device);
  cudaEvent_t e = nullptr;
  ERNIE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

void event_destroy(void* event, int device) {
  if (!event) return;
  int cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur != device) cudaSetDevice(device);
  cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

void event_record(void* event, int device, bool copy_stream) {
  ERNIE_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), pick(device, copy_stream)));
}

void event_wait(void* event, int device, bool copy_stream) {
  ERNIE_CUDA_CHECK(cudaStreamWaitEvent(pick(device, copy_stream), static_cast<cudaEvent_t>(event), 0));
}

void event_synchronize(void* event) { ERNIE_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event))); }

}  // namespace ernie::cuda
