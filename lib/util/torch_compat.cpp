#include "lib/util/torch_compat.h"

#include <torch/torch.h>  // torch::cuda

#if defined(FP8T_WITH_CUDA)
#include <cuda_runtime_api.h>  // CUDART_VERSION
#endif

namespace fp8t {
namespace compat {

std::string cuda_runtime_version() {
#if defined(FP8T_WITH_CUDA)
  return std::to_string(CUDART_VERSION / 1000) + "." + std::to_string((CUDART_VERSION % 1000) / 10);
#else
  return "";
#endif
}

}  // namespace compat
}  // namespace fp8t
