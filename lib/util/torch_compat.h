// LibTorch version shims: the ONE place where differences between LibTorch releases
// (2.11 on the GPU machine, the current wheel on CI) are gated. Nothing else may test
// TORCH_VERSION_* macros.
#pragma once

#include <torch/version.h>  // TORCH_VERSION_MAJOR / MINOR

#include <c10/core/DeviceType.h>  // c10::DeviceType
#include <c10/core/ScalarType.h>  // c10::ScalarType

#include <string>  // std::string

namespace fp8t {
namespace compat {

constexpr int kTorchVersion = TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR;
static_assert(kTorchVersion >= 211, "fp8train needs LibTorch 2.11 or newer");

// "13.0" when this LibTorch was built with CUDA, else "".
std::string cuda_runtime_version();

// Mixed-precision autocast for `device_type` (CUDA or CPU) while alive; a no-op when
// dtype is float32.
class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType device_type, c10::ScalarType dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType device_type_;
  bool active_ = false;
  bool prev_enabled_ = false;
  c10::ScalarType prev_dtype_ = c10::ScalarType::Float;
};

}  // namespace compat
}  // namespace fp8t
