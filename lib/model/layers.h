// The model's building blocks: plain LibTorch modules with no FP8 knowledge.
//
// Linear and norm layers are UnaryModules held through named slots of a SlotModule. The
// typed member and the registered child always point to the same object, and
// SlotModule::replace_slot() swaps both at once, so a later pass (lib/fp8/rewrite.h) can put
// another implementation of a layer in place without the model knowing about it.
#pragma once

#include <torch/torch.h>  // torch::nn::Module, at::Tensor

#include <memory>  // std::shared_ptr
#include <string>  // std::string
#include <vector>  // std::vector

namespace fp8t {
namespace model {

// A layer computing y = f(x) from one tensor.
class UnaryModule : public torch::nn::Module {
 public:
  virtual at::Tensor forward(const at::Tensor& x) = 0;
};

// y = x W^T + b, W: [out, in]. GPT-2 initialisation is applied by the model.
class Linear : public UnaryModule {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias);
  // A bias-free Linear over an existing [out, in] weight (a tied LM head shares the embedding).
  explicit Linear(const at::Tensor& shared_weight);
  at::Tensor forward(const at::Tensor& x) override;
  int64_t in_features;
  int64_t out_features;
  at::Tensor weight;
  at::Tensor bias;  // undefined when bias = false
};

struct AddNormOutput {
  at::Tensor sum;  // x + h: the residual stream after the add
  at::Tensor y;    // the norm of sum
};

// A norm that can also take the residual add before it: forward_add(x, h) is x + h and
// forward(x + h), computed together where an implementation can fuse them (lib/model/gpt.cpp says
// which residual adds the model routes through it).
class ResidualNorm : public UnaryModule {
 public:
  virtual AddNormOutput forward_add(const at::Tensor& x, const at::Tensor& h) = 0;
};

// Normalisation over the last dim. kind: LayerNorm (mean and variance, weight and optional
// bias) or RMSNorm (root mean square, weight only).
class Norm : public ResidualNorm {
 public:
  enum class Kind { kLayerNorm, kRMSNorm };
  Norm(Kind kind, int64_t dim, double eps, bool bias);
  at::Tensor forward(const at::Tensor& x) override;
  // On CUDA with an FP32 x one fused kernel (ops::add_norm) whose y has the dtype the consumer
  // computes in (autocast's); elsewhere x + h, then forward: on the CPU the same ops as unfused.
  AddNormOutput forward_add(const at::Tensor& x, const at::Tensor& h) override;
  Kind kind;
  // forward_add's fused y in the autocast dtype (true: the consumers are autocast Linears, which
  // round their input to it anyway) or in x's dtype (false: some consumer reads y unrounded).
  bool fused_output_autocast = true;
  int64_t dim;
  double eps;
  at::Tensor weight;
  at::Tensor bias;  // undefined for RMSNorm or bias = false
};

// The MLP's activation: GELU (tanh approximation) of x, or SwiGLU silu(gate) * up of the two
// halves of x's last dim. No parameters. On CUDA the SwiGLU is one kernel each way (ops::swiglu:
// the CPU's bits, and only x kept for the backward); elsewhere at::silu(gate) * up.
class Activation : public UnaryModule {
 public:
  enum class Kind { kGeluTanh, kSwiGLU };
  explicit Activation(Kind kind) : kind(kind) {}
  at::Tensor forward(const at::Tensor& x) override;
  Kind kind;
};

// Row groups of a grouped layer: consecutive rows of its input, group g ending (exclusive) at
// offsets[g] (int32 [G] on the input's device, cumulative; nothing is read on the host on the GPU).
// Every group's size is a multiple of kGroupRowAlign (the FP8 grouped GEMM's alignment, padding rows
// zero) and the last group ends at the input's last row.
inline constexpr int64_t kGroupRowAlign = 16;

// A layer of G weights applied to G row groups of one input (a mixture of experts' experts).
class GroupedModule : public torch::nn::Module {
 public:
  virtual at::Tensor forward(const at::Tensor& x, const at::Tensor& offsets) = 0;
};

// y[rows of g] = x[rows of g] W_g^T, weight [G, out, in] (no bias): G Linears of one shape, one per
// row group, in one grouped GEMM (ops::grouped_linear). rows_per_token: the rows each token of the
// batch brings (a router's top-k), so that reports count the layer's MACs per token.
class GroupedLinear : public GroupedModule {
 public:
  GroupedLinear(int64_t groups, int64_t in_features, int64_t out_features, double rows_per_token);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& offsets) override;
  // Keeps groups [first, first + count) only (expert parallelism): the same parameter, narrowed.
  void keep_groups(int64_t first, int64_t count);
  int64_t groups;
  int64_t in_features;
  int64_t out_features;
  double rows_per_token;
  at::Tensor weight;  // [groups, out, in]
};

// A module whose Linear/norm/activation children live in replaceable slots.
class SlotModule : public torch::nn::Module {
 public:
  struct Slot {
    std::string name;
    std::shared_ptr<UnaryModule>* member;
    // For a norm or an activation: the path (relative to this module) of the only Linear that
    // reads its output, e.g. "attn.c_attn". Empty when there is no single consumer.
    std::string feeds;
    // For an activation: the path of the only Linear whose output is its input (e.g. "c_fc").
    std::string fed_by;
    // For a Linear: its input is the output of an op that keeps that output for its own backward
    // (attention: the fused SDPA kernels save their output, and the Linear reads a view of it),
    // so keeping the input as well costs no memory while it is that view.
    bool input_kept_by_producer = false;
  };
  const std::vector<Slot>& slots() const { return slots_; }
  std::shared_ptr<UnaryModule> slot(const std::string& name) const;
  // Put `replacement` in slot `name`: both the typed member and the registered child change.
  void replace_slot(const std::string& name, std::shared_ptr<UnaryModule> replacement);

  // Grouped layers (GroupedLinear) in slots of their own, replaced the same way.
  struct GroupedSlot {
    std::string name;
    std::shared_ptr<GroupedModule>* member;
  };
  const std::vector<GroupedSlot>& grouped_slots() const { return grouped_slots_; }
  void replace_grouped_slot(const std::string& name, std::shared_ptr<GroupedModule> replacement);

 protected:
  void add_slot(const std::string& name, std::shared_ptr<UnaryModule> module,
                std::shared_ptr<UnaryModule>* member, const std::string& feeds = "",
                const std::string& fed_by = "", bool input_kept_by_producer = false);
  void add_grouped_slot(const std::string& name, std::shared_ptr<GroupedModule> module,
                        std::shared_ptr<GroupedModule>* member);

 private:
  std::vector<Slot> slots_;
  std::vector<GroupedSlot> grouped_slots_;
};

}  // namespace model
}  // namespace fp8t
