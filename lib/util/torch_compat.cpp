#include "lib/util/torch_compat.h"

#include <ATen/autocast_mode.h>  // at::autocast
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

c10::ScalarType autocast_dtype_or(c10::DeviceType device_type, c10::ScalarType own) {
  return at::autocast::is_autocast_enabled(device_type) ? at::autocast::get_autocast_dtype(device_type) : own;
}

AutocastGuard::AutocastGuard(c10::DeviceType device_type, c10::ScalarType dtype) : device_type_(device_type) {
  if (dtype == c10::ScalarType::Float) return;
  active_ = true;
  prev_enabled_ = at::autocast::is_autocast_enabled(device_type_);
  prev_dtype_ = at::autocast::get_autocast_dtype(device_type_);
  at::autocast::set_autocast_enabled(device_type_, true);
  at::autocast::set_autocast_dtype(device_type_, dtype);
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  at::autocast::set_autocast_enabled(device_type_, prev_enabled_);
  at::autocast::set_autocast_dtype(device_type_, prev_dtype_);
  at::autocast::clear_cache();
}

}  // namespace compat
}  // namespace fp8t
