// The cuDNN half of attention.h in a build without cuDNN's FP8 attention: no CUDA, or CUDA
// without cudnn-frontend's headers (CMake compiles this file or attention_cuda.cpp, never both).
// Every function says why, so `fp8.attention` on CUDA is refused at startup with that reason and
// the CPU emulation is unaffected.
#include "lib/fp8/backends/attention.h"

namespace fp8t {
namespace fp8 {

std::string cudnn_attention_unavailable() {
#if FP8T_WITH_CUDA
  return "this build has no cudnn-frontend headers (CMake's FP8T_CUDNN_FRONTEND_INCLUDE: pip install "
         "nvidia-cudnn-frontend into .venv, or pass the folder of cudnn_frontend.h, then reconfigure)";
#else
  return "this build has no CUDA";
#endif
}
bool cudnn_attention_needs_fp8_outputs(const at::Device& /*device*/) { return false; }
std::string cudnn_attention_refusal(const AttentionShape&, double, at::ScalarType, Format, bool) {
  return cudnn_attention_unavailable();
}
std::optional<AttentionForward> cudnn_attention_forward(const AttentionOperand&, const AttentionOperand&,
                                                        const AttentionOperand&, double, at::ScalarType,
                                                        const SlotRef*, std::string* refused) {
  *refused = cudnn_attention_unavailable();
  return std::nullopt;
}
std::optional<AttentionGrads> cudnn_attention_backward(const AttentionBackwardInputs&, const AttentionGradScales&,
                                                       double, at::ScalarType, std::string* refused) {
  *refused = cudnn_attention_unavailable();
  return std::nullopt;
}

}  // namespace fp8
}  // namespace fp8t
