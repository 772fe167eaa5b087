#include "lib/model/attention_backend.h"

#include <ATen/Context.h>     // at::globalContext().setSDPPriorityOrder
#include <ATen/SDPBackend.h>  // at::SDPBackend
#if defined(FP8T_WITH_CUDA)
#include <ATen/cuda/CUDAContext.h>  // at::cuda::getDeviceProperties
#endif

#include <algorithm>  // std::find
#include <vector>     // std::vector

namespace fp8t::model {
namespace {

at::SDPBackend aten_backend(AttentionBackend b) {
  switch (b) {
    case AttentionBackend::kFlash: return at::SDPBackend::flash_attention;
    case AttentionBackend::kCudnn: return at::SDPBackend::cudnn_attention;
    case AttentionBackend::kEfficient: return at::SDPBackend::efficient_attention;
    case AttentionBackend::kMath:
    case AttentionBackend::kAuto: break;
  }
  return at::SDPBackend::math;
}

const char* backend_name(AttentionBackend b) {
  switch (b) {
    case AttentionBackend::kFlash: return "flash";
    case AttentionBackend::kCudnn: return "cudnn";
    case AttentionBackend::kEfficient: return "efficient";
    case AttentionBackend::kMath: return "math";
    case AttentionBackend::kAuto: break;
  }
  return "auto";
}

// Compute capability major of a CUDA device; 0 without CUDA.
int compute_capability_major([[maybe_unused]] const at::Device& device) {
#if defined(FP8T_WITH_CUDA)
  if (device.is_cuda()) return at::cuda::getDeviceProperties(device.has_index() ? device.index() : 0)->major;
#endif
  return 0;
}

}  // namespace

AttentionBackend resolve_attention_backend(AttentionBackend requested, const at::Device& device) {
  if (!device.is_cuda()) return AttentionBackend::kMath;
  if (requested != AttentionBackend::kAuto) return requested;
  return compute_capability_major(device) >= 9 ? AttentionBackend::kCudnn : AttentionBackend::kFlash;
}

std::vector<int64_t> attention_priority_order(AttentionBackend first) {
  const std::vector<at::SDPBackend> defaults = {at::SDPBackend::flash_attention, at::SDPBackend::efficient_attention,
                                                at::SDPBackend::math, at::SDPBackend::cudnn_attention,
                                                at::SDPBackend::overrideable};
  const at::SDPBackend head = aten_backend(first);
  std::vector<int64_t> order = {static_cast<int64_t>(head)};
  for (at::SDPBackend b : defaults) {
    if (b != head) order.push_back(static_cast<int64_t>(b));
  }
  return order;
}

std::string select_attention_backend(AttentionBackend requested, const at::Device& device) {
  const AttentionBackend chosen = resolve_attention_backend(requested, device);
  if (device.is_cuda()) at::globalContext().setSDPPriorityOrder(attention_priority_order(chosen));
  return backend_name(chosen);
}

}  // namespace fp8t::model
