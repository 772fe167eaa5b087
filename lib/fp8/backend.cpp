#include "lib/fp8/backend.h"

#include "lib/fp8/cpu_backend.h"  // cpu_backend
#include "lib/util/error.h"       // FP8T_THROW
#if defined(FP8T_WITH_CUDA)
#include "lib/fp8/cuda_backend.h"  // cuda_backend
#endif

namespace fp8t {
namespace fp8 {

const char* to_string(GemmKind k) {
  switch (k) {
    case GemmKind::kFprop: return "fprop";
    case GemmKind::kDgrad: return "dgrad";
    case GemmKind::kWgrad: return "wgrad";
  }
  return "?";
}

Fp8Tensor Backend::gelu_quantize(const at::Tensor& h, const SlotRef& slot, bool rowwise, bool columnwise) {
  return quantize(at::gelu(h, "tanh"), slot, rowwise, columnwise);
}

Fp8Tensor Backend::dgelu_quantize_grad(const at::Tensor& dy, const at::Tensor& h, const SlotRef& slot,
                                       bool want_dbias, at::Tensor* dbias) {
  return quantize_grad(at::gelu_backward(dy.to(h.scalar_type()), h, "tanh"), slot, want_dbias, dbias);
}

#if defined(FP8T_WITH_CUDA)
constexpr const char* kSupported = "cpu, cuda";
#else
constexpr const char* kSupported = "cpu";
#endif

Backend& backend_for(const at::Device& device) {
  if (device.is_cpu()) return cpu_backend();
#if defined(FP8T_WITH_CUDA)
  if (device.is_cuda()) return cuda_backend();
#endif
  FP8T_THROW(ExitCode::kBadInput, "precision fp8 has no backend for device ", device.str(),
             " in this build (supported: ", kSupported, ")");
}

}  // namespace fp8
}  // namespace fp8t
