// A tiny mixture-of-experts model section for the tests (lib/model/moe_model.h): two LLaMA-shaped
// blocks (RMSNorm, SwiGLU, RoPE, no biases) whose MLPs are `experts` SwiGLU experts of width
// `d_ff` with top-2 routing; vocabulary 64, 8 tokens, 2 heads unless the caller changes them.
#pragma once

#include <cstdint>  // int64_t

#include "lib/config/experiment.h"  // ModelSection

namespace fp8t::test {

inline ModelSection tiny_moe(int64_t d_model, int64_t d_ff, int64_t experts) {
  ModelSection m;
  m.vocab_size = 64;
  m.seq_len = 8;
  m.n_layer = 2;
  m.n_head = 2;
  m.d_model = d_model;
  m.norm = NormKind::kRMSNorm;
  m.activation = Activation::kSwiGLU;
  m.position = PositionKind::kRope;
  m.bias = false;
  m.moe.experts = experts;
  m.moe.top_k = 2;
  m.moe.d_ff = d_ff;
  return m;
}

}  // namespace fp8t::test
