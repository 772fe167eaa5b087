#include "lib/util/versions.h"

#include <torch/torch.h>  // TORCH_VERSION, torch::cuda

#include <sstream>  // std::ostringstream

#include "fp8t_build_info.h"  // FP8T_VERSION_STRING (generated)
#include "lib/util/torch_compat.h"  // compat::cuda_runtime_version

namespace fp8t {

std::string fp8train_version() { return FP8T_VERSION_STRING; }

std::string runtime_versions() {
  std::ostringstream os;
  os << "LibTorch " << TORCH_VERSION << " (CMake found " << FP8T_TORCH_BUILD_VERSION << ")";
  const std::string cuda = compat::cuda_runtime_version();
  os << ", CUDA " << (cuda.empty() ? "not built in" : cuda);
  os << ", GPUs visible: " << (torch::cuda::is_available() ? torch::cuda::device_count() : 0);
  return os.str();
}

}  // namespace fp8t
