// Which fused kernel runs the model's scaled-dot-product attention on a CUDA device
// (train.attention_backend). at::scaled_dot_product_attention tries its backends in a
// process-wide priority order and takes the first that accepts the shape, dtype and GPU; this
// sets that order. The chosen backend goes first and the others keep LibTorch's order behind it,
// so a shape the chosen one refuses still runs (on the next). On the CPU the order is left alone.
#pragma once

#include <string>  // std::string

#include "lib/config/experiment.h"  // AttentionBackend
#include "lib/util/torch_pch.h"     // at::Device

namespace fp8t::model {

// kAuto's choice for this device: cudnn on compute capability 9.0 and newer (where its fused
// attention was measured faster than flash at fp8train's LLaMA shapes: docs/precision.md),
// flash below. A CPU device resolves to kMath (nothing is set there).
AttentionBackend resolve_attention_backend(AttentionBackend requested, const at::Device& device);

// ATen's backend order (at::SDPBackend values, all of them) with `first` in front and the rest in
// LibTorch's default order (flash, efficient, math, cudnn, overrideable).
std::vector<int64_t> attention_priority_order(AttentionBackend first);

// Sets the process-wide order for `requested` on a CUDA device (nothing on the CPU) and returns
// the resolved backend's name for the log ("cudnn", "flash", ...).
std::string select_attention_backend(AttentionBackend requested, const at::Device& device);

}  // namespace fp8t::model
