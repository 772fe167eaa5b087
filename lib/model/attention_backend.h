// Which fused kernel runs the model's scaled-dot-product attention on a CUDA device
// (train.attention_backend). at::scaled_dot_product_attention tries its backends in a
// process-wide priority order and takes the first that accepts the shape, dtype and GPU; this
// sets that order. The chosen backend goes first and the others keep LibTorch's order behind it,
// so a shape the chosen one refuses still runs (on the next). On the CPU the order is left alone.
#pragma once

#include <cstdint>  // int64_t
#include <string>   // std::string

#include "lib/config/experiment.h"  // AttentionBackend
#include "lib/util/torch_pch.h"     // at::Device

namespace fp8t::model {

// LibTorch's cuDNN attention backward reads past the end of a buffer when a CUDA graph replays
// it at a sequence length that is not a multiple of this (an H100, PyTorch 2.11: an illegal memory
// access on the first replayed step at 32, 64, 96, 100, 127, 160, 192 and 200; none at 128, 256,
// 512 or 1024; none eagerly under compute-sanitizer at 64). docs/precision.md, Attention.
inline constexpr int64_t kCudnnGraphSeqMultiple = 128;

// What train.attention_backend resolves to for a run, and why when it is not what was asked.
struct AttentionChoice {
  AttentionBackend backend = AttentionBackend::kMath;
  std::string replaced;  // non-empty: why the requested backend was replaced (for one warning)
};

// The choice on a GPU of compute capability `cc_major` for attention over `seq_len` tokens,
// `cuda_graphs` saying whether the step is replayed as a CUDA graph. kAuto: cudnn on 9.0 and newer
// where seq_len is a multiple of kCudnnGraphSeqMultiple (there its fused attention was measured
// faster than flash at fp8train's LLaMA shapes: docs/precision.md), flash otherwise. An explicit
// cudnn becomes flash, with the reason, where a CUDA graph would replay it at another length.
AttentionChoice choose_attention_backend(AttentionBackend requested, int cc_major, int64_t seq_len, bool cuda_graphs);

// The same for `device`; a CPU device resolves to kMath (nothing is set there).
AttentionChoice resolve_attention_backend(AttentionBackend requested, const at::Device& device, int64_t seq_len,
                                          bool cuda_graphs);

// ATen's backend order (at::SDPBackend values, all of them) with `first` in front and the rest in
// LibTorch's default order (flash, efficient, math, cudnn, overrideable).
std::vector<int64_t> attention_priority_order(AttentionBackend first);

// Sets the process-wide order for the resolved backend on a CUDA device (nothing on the CPU) and
// returns the choice (with, where the requested backend was replaced, why).
AttentionChoice select_attention_backend(AttentionBackend requested, const at::Device& device, int64_t seq_len,
                                         bool cuda_graphs);

// The backend's name for the log: "cudnn", "flash", "efficient", "math" or "auto".
const char* attention_backend_name(AttentionBackend b);

}  // namespace fp8t::model
