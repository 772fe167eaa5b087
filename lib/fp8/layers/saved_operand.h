// An FP8 operand kept in an autograd context's saved_data for the backward, and read back: its
// codes, scale_inv, format and scale layout under "<name>_col", "<name>_col_sinv", "<name>_fmt" and
// "<name>_layout" (Fp8Linear's and Fp8GroupedLinear's nodes).
#pragma once

#include <torch/torch.h>  // torch::autograd::AutogradContext

#include <string>  // std::string

#include "lib/fp8/backends/backend.h"  // Fp8Operand, Format, ScaleLayout

namespace fp8t {
namespace fp8 {

inline void save_operand(torch::autograd::AutogradContext* ctx, const std::string& name, const Fp8Operand& op) {
  ctx->saved_data[name + "_col"] = op.codes;
  ctx->saved_data[name + "_col_sinv"] = op.scale_inv;
  ctx->saved_data[name + "_fmt"] = static_cast<int64_t>(op.format);
  ctx->saved_data[name + "_layout"] = static_cast<int64_t>(op.scale_layout);
}

inline Fp8Operand saved_operand(torch::autograd::AutogradContext* ctx, const std::string& name) {
  return Fp8Operand{ctx->saved_data[name + "_col"].toTensor(), ctx->saved_data[name + "_col_sinv"].toTensor(),
                    static_cast<Format>(ctx->saved_data[name + "_fmt"].toInt()),
                    static_cast<ScaleLayout>(ctx->saved_data[name + "_layout"].toInt())};
}

}  // namespace fp8
}  // namespace fp8t
