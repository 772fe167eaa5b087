// LibTorch version shims: the ONE place where differences between LibTorch releases
// (2.11 on the GPU machine, the current wheel on CI) are gated. Nothing else may test
// TORCH_VERSION_* macros.
#pragma once

#include <torch/version.h>  // TORCH_VERSION_MAJOR / MINOR

#include <ATen/core/ivalue.h>     // c10::IValue, torch::CustomClassHolder
#include <c10/core/DeviceType.h>  // c10::DeviceType
#include <c10/core/ScalarType.h>  // c10::ScalarType

#include <string>       // std::string
#include <type_traits>  // std::is_base_of_v
#include <utility>      // std::move

namespace fp8t {
namespace compat {

constexpr int kTorchVersion = TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR;
static_assert(kTorchVersion >= 211, "fp8train needs LibTorch 2.11 or newer");

// "13.0" when this LibTorch was built with CUDA, else "".
std::string cuda_runtime_version();

// The dtype that high-precision work on a tensor of `own` dtype on `device_type` runs in: the
// autocast dtype when autocast is on for that device type, else `own`. The FP8 layers use it for
// what the unconverted model would compute in (overridden GEMMs, outputs, hand-over carriers).
c10::ScalarType autocast_dtype_or(c10::DeviceType device_type, c10::ScalarType own);

// A reference-counted C++ object in an IValue (an autograd context's saved_data), and back: the
// context then keeps the object alive. An IValue capsule holds the pointer itself (one reference
// count, no allocation); LibTorch's registered custom classes would allocate a TorchScript object
// per call, which this avoids on the per-step path. The capsule API is LibTorch-internal in
// spirit, hence here.
template <typename T>
c10::IValue to_ivalue(c10::intrusive_ptr<T> object) {
  static_assert(std::is_base_of_v<torch::CustomClassHolder, T>, "T must derive from torch::CustomClassHolder");
  return c10::IValue::make_capsule(std::move(object));
}

template <typename T>
c10::intrusive_ptr<T> from_ivalue(const c10::IValue& value) {
  return c10::static_intrusive_pointer_cast<T>(value.toCapsule());
}

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
