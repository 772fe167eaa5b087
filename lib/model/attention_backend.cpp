#include "lib/model/attention_backend.h"

#include <ATen/Context.h>     // at::globalContext().setSDPPriorityOrder
#include <ATen/SDPBackend.h>  // at::SDPBackend
#if defined(FP8T_WITH_CUDA)
#include <ATen/cuda/CUDAContext.h>  // at::cuda::getDeviceProperties
#endif

#include <algorithm>  // std::find
#include <sstream>    // std::ostringstream
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

// Compute capability major of a CUDA device; 0 without CUDA.
int compute_capability_major([[maybe_unused]] const at::Device& device) {
#if defined(FP8T_WITH_CUDA)
  if (device.is_cuda()) return at::cuda::getDeviceProperties(device.has_index() ? device.index() : 0)->major;
#endif
  return 0;
}

}  // namespace

AttentionChoice choose_attention_backend(AttentionBackend requested, int cc_major, int64_t seq_len, bool cuda_graphs) {
  const bool whole_tiles = seq_len % kCudnnGraphSeqMultiple == 0;
  if (requested == AttentionBackend::kAuto) {
    return {cc_major >= 9 && whole_tiles ? AttentionBackend::kCudnn : AttentionBackend::kFlash, ""};
  }
  if (requested == AttentionBackend::kCudnn && cuda_graphs && !whole_tiles) {
    std::ostringstream why;
    why << "train.attention_backend cudnn: flash runs the attention instead, because model.seq_len " << seq_len
        << " is not a multiple of " << kCudnnGraphSeqMultiple
        << ", where LibTorch's cuDNN attention backward reads out of bounds when a CUDA graph replays it (an "
           "illegal memory access); train.cuda_graphs=false keeps cudnn";
    return {AttentionBackend::kFlash, why.str()};
  }
  return {requested, ""};
}

AttentionChoice resolve_attention_backend(AttentionBackend requested, const at::Device& device, int64_t seq_len,
                                          bool cuda_graphs) {
  if (!device.is_cuda()) return {AttentionBackend::kMath, ""};
  return choose_attention_backend(requested, compute_capability_major(device), seq_len, cuda_graphs);
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

AttentionChoice select_attention_backend(AttentionBackend requested, const at::Device& device, int64_t seq_len,
                                         bool cuda_graphs) {
  AttentionChoice chosen = resolve_attention_backend(requested, device, seq_len, cuda_graphs);
  if (device.is_cuda()) at::globalContext().setSDPPriorityOrder(attention_priority_order(chosen.backend));
  return chosen;
}

const char* attention_backend_name(AttentionBackend b) {
  switch (b) {
    case AttentionBackend::kFlash: return "flash";
    case AttentionBackend::kCudnn: return "cudnn";
    case AttentionBackend::kEfficient: return "efficient";
    case AttentionBackend::kMath: return "math";
    case AttentionBackend::kAuto: break;
  }
  return "auto";
}

}  // namespace fp8t::model
