#include "lib/dist/expert_parallel.h"

#include <string>  // std::to_string

#include "lib/util/error.h"  // FP8T_INPUT_CHECK

namespace fp8t::dist {
namespace {

// The expert group's all-to-all for the model (model::ExpertExchange).
class GroupExchange : public model::ExpertExchange {
 public:
  explicit GroupExchange(std::shared_ptr<Communicator> group) : group_(std::move(group)) {}
  int ranks() const override { return group_->world_size(); }
  int rank() const override { return group_->rank(); }
  at::Tensor all_to_all(const at::Tensor& rows, const std::vector<int64_t>& send,
                        const std::vector<int64_t>& recv) override {
    int64_t total = 0;
    for (int64_t n : recv) total += n;
    std::vector<int64_t> shape = rows.sizes().vec();
    shape[0] = total;
    at::Tensor out = at::empty(shape, rows.options());
    group_->all_to_all(out, rows.contiguous(), recv, send);
    return out;
  }

 private:
  std::shared_ptr<Communicator> group_;
};

std::vector<int> members(int first, int step, int count) {
  std::vector<int> out;
  for (int i = 0; i < count; ++i) out.push_back(first + i * step);
  return out;
}

}  // namespace

ExpertParallel::ExpertParallel(std::shared_ptr<Communicator> comm, int64_t group_size) : comm_(std::move(comm)) {
  const int world = comm_->world_size(), me = comm_->rank();
  FP8T_INPUT_CHECK(group_size >= 1 && world % group_size == 0, "dist.expert_parallel = ", group_size,
                   " does not divide the job's ", world, " ranks; expected a divisor (torchrun --nproc-per-node)");
  const int n = static_cast<int>(group_size), groups = world / n;
  // Every rank forms every group in the same order (subgroup is collective over the members).
  for (int g = 0; g < groups; ++g) {
    const std::vector<int> ranks = members(g * n, 1, n);
    auto c = (me / n == g) ? comm_->subgroup(std::string("experts-").append(std::to_string(g)), ranks) : nullptr;
    if (c) group_ = std::move(c);
  }
  if (groups > 1) {
    for (int j = 0; j < n; ++j) {
      const std::vector<int> ranks = members(j, n, groups);
      auto c = (me % n == j) ? comm_->subgroup(std::string("expert-replicas-").append(std::to_string(j)), ranks) : nullptr;
      if (c) replicas_ = std::move(c);
    }
  }
}

c10::intrusive_ptr<model::ExpertExchange> ExpertParallel::exchange() const {
  return c10::make_intrusive<GroupExchange>(group_);
}

void ExpertParallel::broadcast_experts(const std::vector<at::Tensor>& experts) {
  if (replicas_) replicas_->broadcast(experts, 0);
}

void ExpertParallel::reduce_gradients(const std::vector<at::Tensor>& experts) {
  std::vector<at::Tensor> grads;
  for (const at::Tensor& p : experts) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return;
  if (replicas_) {  // one flat buffer: a collective takes one tensor per rank
    std::vector<at::Tensor> flat;
    for (const at::Tensor& g : grads) flat.push_back(g.reshape(-1));
    const at::Tensor all = at::cat(flat);
    replicas_->all_reduce(all, ReduceOp::kSum);
    int64_t offset = 0;
    for (at::Tensor& g : grads) {
      g.copy_(all.narrow(0, offset, g.numel()).view(g.sizes()));
      offset += g.numel();
    }
  }
  for (at::Tensor& g : grads) g.div_(static_cast<double>(comm_->world_size()));
}

at::Tensor ExpertParallel::squared_norm(const std::vector<at::Tensor>& experts) {
  at::Tensor sum;
  for (const at::Tensor& p : experts) {
    if (!p.grad().defined()) continue;
    const at::Tensor sq = p.grad().to(at::kFloat).pow(2).sum();
    sum = sum.defined() ? sum + sq : sq;
  }
  if (!sum.defined()) sum = at::zeros({}, experts.front().options().dtype(at::kFloat));
  group_->all_reduce(sum, ReduceOp::kSum);
  return sum;
}

at::Tensor ExpertParallel::gather(const at::Tensor& local) {
  const at::Tensor flat = local.contiguous().view(-1);
  at::Tensor whole = at::empty({flat.numel() * group_size()}, flat.options());
  group_->all_gather(whole, flat);
  std::vector<int64_t> shape = local.sizes().vec();
  shape[0] *= group_size();
  return whole.view(shape);
}

}  // namespace fp8t::dist
