#include "lib/ops/tied_embedding.h"

#include <torch/torch.h>  // torch::autograd::Function

#include "lib/util/error.h"         // FP8T_CHECK
#include "lib/util/torch_compat.h"  // compat::to_ivalue, from_ivalue

namespace fp8t {
namespace ops {

namespace {

class TiedEmbeddingFunction : public torch::autograd::Function<TiedEmbeddingFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& weight, const at::Tensor& ids,
                            std::shared_ptr<TiedGradient> tied) {
    const int64_t number = ++tied->forwards;
    ctx->saved_data["tied"] = compat::to_ivalue(c10::make_intrusive<detail::TiedHolder>(std::move(tied)));
    ctx->saved_data["number"] = number;
    ctx->saved_data["vocab"] = weight.size(0);
    ctx->saved_data["dtype"] = static_cast<int64_t>(weight.scalar_type());
    ctx->save_for_backward({ids});
    return at::embedding(weight, ids);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    TiedGradient& tied = *compat::from_ivalue<detail::TiedHolder>(ctx->saved_data["tied"])->tied;
    const at::Tensor ids = ctx->get_saved_variables()[0].reshape({-1}).to(at::kLong);
    const at::Tensor& g = grads[0];
    const int64_t d = g.size(-1);
    at::Tensor dw;
    if (tied.dw.defined() && tied.stored_for == ctx->saved_data["number"].toInt()) {
      dw = std::move(tied.dw);
    } else {
      const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
      dw = at::zeros({ctx->saved_data["vocab"].toInt(), d}, g.options().dtype(dtype));
    }
    tied.dw = at::Tensor();
    tied.stored_for = -1;
    dw.index_put_({ids}, g.reshape({-1, d}).to(dw.scalar_type()), /*accumulate=*/true);
    return {dw, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor tied_embedding(const at::Tensor& weight, const at::Tensor& ids, const std::shared_ptr<TiedGradient>& tied) {
  FP8T_CHECK(tied != nullptr, "tied_embedding: no TiedGradient");
  FP8T_CHECK(weight.defined() && weight.dim() == 2 && at::isFloatingType(weight.scalar_type()),
             "tied_embedding: the weight must be a 2-D floating tensor [vocab, d]");
  FP8T_CHECK(ids.defined() && at::isIntegralType(ids.scalar_type(), /*includeBool=*/false),
             "tied_embedding: the ids must be an integer tensor, got ", ids.scalar_type());
  return TiedEmbeddingFunction::apply(weight, ids, tied);
}

}  // namespace ops
}  // namespace fp8t
