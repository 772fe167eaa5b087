// Expert parallelism as a mixture of experts sees it: the experts of every MoE block are spread
// over the ranks of an expert group, and each token's rows travel to the ranks of its experts and
// back. lib/dist/expert_parallel.h implements it over c10d (the model never names a process group,
// as with UnitHooks for ZeRO-3); lib/model/moe_layer.h calls it.
#pragma once

#include <ATen/core/Tensor.h>  // at::Tensor
#include <ATen/core/ivalue.h>  // torch::CustomClassHolder (an autograd node keeps the exchange alive)

#include <cstdint>  // int64_t
#include <vector>   // std::vector

namespace fp8t {
namespace model {

class ExpertExchange : public torch::CustomClassHolder {
 public:
  ~ExpertExchange() override = default;
  // The expert group's ranks and this rank's place in it: it holds experts
  // [rank() * E / ranks(), (rank() + 1) * E / ranks()) of every MoE block.
  virtual int ranks() const = 0;
  virtual int rank() const = 0;
  // All-to-all of rows along dim 0: `rows` holds send[i] rows for rank i of the group, in rank
  // order; returns recv[i] rows from each rank i, in rank order (recv: what each sends here).
  // Not differentiable by itself (moe_layer.cpp wraps it in an autograd node whose backward is
  // the exchange reversed).
  virtual at::Tensor all_to_all(const at::Tensor& rows, const std::vector<int64_t>& send,
                                const std::vector<int64_t>& recv) = 0;
};

}  // namespace model
}  // namespace fp8t
