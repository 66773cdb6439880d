// What a tuning-cache file belongs to: the GPU model and the versions of the libraries whose algorithms
// it records. Another GPU or library version gets its own file.
#include <cublasLt.h>
#ifdef ERNIE_HAVE_CUDNN
#include <cudnn.h>
#endif

#include <map>
#include <mutex>

#include "ops/cuda/common.h"

namespace ernie::cuda {

std::string tuning_identity(int device) {
  static std::mutex mu;
  static std::map<int, std::string> ids;
  std::lock_guard<std::mutex> lk(mu);
  std::string& id = ids[device];
  if (id.empty()) {
    cudaDeviceProp prop{};
    ERNIE_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    id = std::string(prop.name) + " cc" + std::to_string(prop.major) + "." + std::to_string(prop.minor) +
         " cublasLt " + std::to_string(cublasLtGetVersion());
#ifdef ERNIE_HAVE_CUDNN
    id += " cudnn " + std::to_string(cudnnGetVersion());
#endif
  }
  return id;
}

}  // namespace ernie::cuda
