// LibTorch version shims: the ONE place where differences between LibTorch releases
// (2.11 on the GPU machine, the current wheel on CI) are gated. Nothing else may test
// TORCH_VERSION_* macros.
#pragma once

#include <torch/version.h>  // TORCH_VERSION_MAJOR / MINOR

#include <string>  // std::string

namespace fp8t {
namespace compat {

constexpr int kTorchVersion = TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR;
static_assert(kTorchVersion >= 211, "fp8train needs LibTorch 2.11 or newer");

// "13.0" when this LibTorch was built with CUDA, else "".
std::string cuda_runtime_version();

}  // namespace compat
}  // namespace fp8t
