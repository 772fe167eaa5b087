// The moe.* keys of the field table and the rules between them and the rest of the config.
#include "lib/config/moe_fields.h"

#include <string>  // std::string, std::to_string

#include "lib/config/field_builders.h"  // bool_field, int_field, float_field, enum_field, EnumNames
#include "lib/config/loader.h"          // ConfigSources
#include "lib/config/parse.h"           // fail
#include "lib/config/text.h"            // format_float

namespace fp8t {
namespace config {
namespace {

const EnumNames<RouterScore>& score_names() {
  static const EnumNames<RouterScore> n = {{RouterScore::kSoftmax, "softmax"}, {RouterScore::kSigmoid, "sigmoid"}};
  return n;
}
const EnumNames<LoadBalance>& balance_names() {
  static const EnumNames<LoadBalance> n = {
      {LoadBalance::kAuxLoss, "aux_loss"}, {LoadBalance::kBias, "bias"}, {LoadBalance::kNone, "none"}};
  return n;
}

std::string named(const ConfigSources& s, const std::string& key) { return key + " (" + s.origin(key) + ")"; }
std::string str(int64_t v) { return std::to_string(v); }

// The grouped GEMM kernel takes fewer than 1024 groups (experts per rank).
constexpr int64_t kMaxExperts = 1023;

// A moe.* key set while moe.experts is 0 would do nothing: refused when set by a flag, or in a file
// with a value other than the default (the shipped configs spell out every key, as for the recipes'
// keys in validate.cpp).
void refuse_keys_of_dense_model(const ExperimentConfig& c, const ConfigSources& s) {
  const ExperimentConfig defaults;
  for (const char* key : {"moe.top_k", "moe.d_ff", "moe.shared_experts", "moe.score", "moe.norm_topk", "moe.balance",
                          "moe.aux_loss_coef", "moe.bias_update_rate", "moe.first_k_dense", "moe.force_balance"}) {
    const Field* f = find_field(key);
    if (s.is_default(key)) continue;
    const bool flag = s.origin(key).rfind("--", 0) == 0;
    if (flag || f->get(c) != f->get(defaults)) {
      fail(named(s, key) + " has no effect while moe.experts is 0 (a dense model); set moe.experts to the number of "
           "experts for a mixture-of-experts model, or remove the key");
    }
  }
}

}  // namespace

void add_moe_fields(std::vector<Field>& t) {
  t.push_back(int_field("moe.experts",
                        "routed experts per mixture-of-experts block; 0: a dense model (every other moe key unused)",
                        [](auto& c) -> auto& { return c.model.moe.experts; }, Range{0.0, 1.0 * kMaxExperts}));
  t.push_back(int_field("moe.top_k", "experts each token is routed to (dropless: every token gets all of them)",
                        [](auto& c) -> auto& { return c.model.moe.top_k; }, at_least(1)));
  t.push_back(int_field("moe.d_ff", "each expert's SwiGLU width; 0 means model.d_ff (or 4 * model.d_model)",
                        [](auto& c) -> auto& { return c.model.moe.d_ff; }, at_least(0)));
  t.push_back(int_field("moe.shared_experts",
                        "experts every token goes through besides its routed ones (one SwiGLU MLP of "
                        "shared_experts * moe.d_ff)",
                        [](auto& c) -> auto& { return c.model.moe.shared_experts; }, at_least(0)));
  t.push_back(enum_field("moe.score", "the router's expert scores: softmax over the experts, or a sigmoid each",
                         score_names(), [](auto& c) -> auto& { return c.model.moe.score; }));
  t.push_back(bool_field("moe.norm_topk",
                         "renormalise the chosen experts' scores to sum 1 (always done for moe.score sigmoid)",
                         [](auto& c) -> auto& { return c.model.moe.norm_topk; }));
  t.push_back(enum_field("moe.balance",
                         "how the experts' load is kept even: aux_loss (moe.aux_loss_coef), bias (a per-expert bias "
                         "on the selection, moved by moe.bias_update_rate after each step; no loss term) or none",
                         balance_names(), [](auto& c) -> auto& { return c.model.moe.balance; }));
  t.push_back(float_field("moe.aux_loss_coef", "moe.balance aux_loss: weight of the load-balancing loss",
                          [](auto& c) -> auto& { return c.model.moe.aux_loss_coef; }, at_least(0)));
  t.push_back(float_field("moe.bias_update_rate",
                          "moe.balance bias: each step every expert's selection bias moves by this towards an even load",
                          [](auto& c) -> auto& { return c.model.moe.bias_update_rate; }, at_least(0)));
  t.push_back(int_field("moe.first_k_dense", "the first blocks keep a dense MLP of model.d_ff (DeepSeek's first_k_dense)",
                        [](auto& c) -> auto& { return c.model.moe.first_k_dense; }, at_least(0)));
  t.push_back(bool_field("moe.force_balance",
                         "benchmarks only: token t's j-th expert is (t * top_k + j) mod experts whatever the router "
                         "says (its scores still weigh the outputs), so every expert gets the same tokens",
                         [](auto& c) -> auto& { return c.model.moe.force_balance; }));
}

void check_moe_rules(const ExperimentConfig& c, const ConfigSources& s) {
  const MoeSection& moe = c.model.moe;
  if (!moe.enabled()) {
    refuse_keys_of_dense_model(c, s);
    if (c.dist.expert_parallel > 1) {
      fail(named(s, "dist.expert_parallel") + " = " + str(c.dist.expert_parallel) +
           " shards experts, but moe.experts is 0 (a dense model); expected 1");
    }
    return;
  }
  if (moe.top_k > moe.experts) {
    fail(named(s, "moe.top_k") + ": " + str(moe.top_k) + " is more than " + named(s, "moe.experts") + " = " +
         str(moe.experts) + "; expected top_k <= experts");
  }
  if (moe.first_k_dense >= c.model.n_layer) {
    fail(named(s, "moe.first_k_dense") + ": " + str(moe.first_k_dense) + " leaves none of the " +
         named(s, "model.n_layer") + " = " + str(c.model.n_layer) + " blocks a mixture of experts; expected < n_layer");
  }
  if (c.dist.expert_parallel > 1 && moe.experts % c.dist.expert_parallel != 0) {
    fail(named(s, "dist.expert_parallel") + ": " + str(c.dist.expert_parallel) + " does not divide " +
         named(s, "moe.experts") + " = " + str(moe.experts) + "; expected a divisor, so that every rank of an expert "
         "group holds the same number of experts");
  }
}

const char* to_string(RouterScore v) { return enum_name(score_names(), v); }
const char* to_string(LoadBalance v) { return enum_name(balance_names(), v); }

}  // namespace config
}  // namespace fp8t
