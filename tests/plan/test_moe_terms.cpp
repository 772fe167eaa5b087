// lib/plan/moe_terms.* and its use in the estimate: a mixture of experts' parameters (all, active,
// per rank under dist.expert_parallel), its FP8 weight copies and its transient buffers, checked
// against the parameters of the model the config builds and against the formulas written out.
#include "lib/plan/moe_terms.h"

#include <torch/torch.h>  // torch::manual_seed

#include "lib/model/model.h"     // model::build
#include "lib/plan/resources.h"  // estimate_training_memory
#include "tests/catch.h"
#include "tests/model/moe_test_config.h"  // test::tiny_moe

using namespace fp8t;

namespace {

// The OLMoE-1B-7B shape of configs/olmoe-1b-7b.yaml.
ExperimentConfig olmoe() {
  ExperimentConfig c;
  c.precision = Precision::kFp8;
  c.model.vocab_size = 50304;
  c.model.seq_len = 4096;
  c.model.n_layer = 16;
  c.model.n_head = 16;
  c.model.d_model = 2048;
  c.model.d_ff = 1024;
  c.model.norm = NormKind::kRMSNorm;
  c.model.activation = Activation::kSwiGLU;
  c.model.position = PositionKind::kRope;
  c.model.bias = false;
  c.model.moe.experts = 64;
  c.model.moe.top_k = 8;
  c.train.micro_batch_size = 2;
  return c;
}

}  // namespace

TEST_CASE("moe terms: OLMoE-1B-7B has 6.92B parameters, 1.28B active", "[plan]") {
  const ExperimentConfig c = olmoe();
  const plan::MemoryEstimate e = plan::estimate_training_memory(c);
  // Per block: attention 4 x 2048^2, router 64 x 2048, experts 64 x 3 x 2048 x 1024; embeddings and
  // the untied head 2 x 50304 x 2048 (norms left out: the estimate's lower bound).
  const double attention = 4.0 * 2048 * 2048, router = 64.0 * 2048, experts = 64.0 * 3 * 2048 * 1024;
  const double total = 16 * (attention + router + experts) + 2.0 * 50304 * 2048;
  CHECK(e.total_parameters == Approx(total).epsilon(1e-12));
  CHECK(e.total_parameters == Approx(6.92e9).epsilon(2e-3));
  CHECK(e.active_parameters == Approx(total - 16 * experts * (1.0 - 8.0 / 64.0)).epsilon(1e-12));
  CHECK(e.active_parameters == Approx(1.28e9).epsilon(2e-3));
  CHECK(e.parameters == e.total_parameters);  // one process holds every expert
  // One block's dispatch buffers: (8192 tokens x top-8 = 65536 pairs, a multiple of 16, + 16 x 64
  // experts' rows) x (2 d + 3 F) bf16 elements.
  const double rows = 65536.0 + 1024.0;
  CHECK(plan::dispatch_buffer_bytes(c) == Approx(rows * (2 * 2048 + 3 * 1024) * 2.0));
  // The larger transient here: experts_fc's weight gradient (64 x 2F x d, bf16 + FP32) beside
  // rows x (d + 2F) bf16 gradient elements.
  CHECK(e.moe_transient_bytes == Approx(64.0 * 2048 * 2048 * 6.0 + rows * (2048 + 2 * 1024) * 2.0));
}

TEST_CASE("moe terms: expert parallelism divides the experts a rank holds, and their FP8 copies", "[plan]") {
  ExperimentConfig c = olmoe();
  c.dist.expert_parallel = 8;
  ParallelLayout layout = ParallelLayout::of(c.dist);
  layout.world_size = 8;
  const plan::MemoryEstimate one = plan::estimate_training_memory(olmoe());
  const plan::MemoryEstimate ep = plan::estimate_training_memory(c, layout);
  const double experts = 16 * 64.0 * 3 * 2048 * 1024;
  CHECK(ep.parameters == Approx(one.parameters - experts * 7.0 / 8.0).epsilon(1e-12));
  // Every block matrix but the routers has an E4M3 copy and its transpose (2 bytes), the experts
  // of this rank only.
  CHECK(ep.fp8_bytes_per_param * ep.parameters ==
        Approx(one.fp8_bytes_per_param * one.parameters - 2.0 * experts * 7.0 / 8.0).epsilon(1e-9));
  // With an eighth of the experts the dispatch buffers are the larger transient.
  CHECK(ep.moe_transient_bytes == Approx(plan::dispatch_buffer_bytes(c)));
  CHECK(one.moe_transient_bytes > ep.moe_transient_bytes);
  // A layout whose ranks the group size does not divide holds every expert.
  layout.world_size = 6;
  CHECK(plan::experts_per_rank(c, plan::moe_sizes(c.model, 4.0 * 2048 * 2048), 6) == Approx(experts));
}

TEST_CASE("moe terms: the estimate's parameters are the built model's matrices", "[plan]") {
  ExperimentConfig c;
  c.model = test::tiny_moe(/*d_model=*/32, /*d_ff=*/48, /*experts=*/4);
  c.model.moe.shared_experts = 1;
  c.model.n_layer = 3;
  c.model.moe.first_k_dense = 1;
  torch::manual_seed(0);
  const auto model = model::build(c.model);
  int64_t matrices = 0;  // every parameter but the norms' gains
  for (const auto& [name, p] : model->unique_named_parameters()) matrices += p.dim() >= 2 ? p.numel() : 0;
  CHECK(plan::estimate_training_memory(c).total_parameters == Approx(static_cast<double>(matrices)));
}

TEST_CASE("moe terms: a dense model has none, and activations drop under recompute mlp", "[plan]") {
  ExperimentConfig dense;
  CHECK(plan::moe_sizes(dense.model, 1.0).experts == 0.0);
  CHECK(plan::dispatch_buffer_bytes(dense) == 0.0);
  ExperimentConfig c = olmoe();
  const double kept = plan::moe_kept_per_token(c);
  // fp8: the router's FP32 input (2 d) + per routed row (8 + 1024 / 8192 padding rows per token)
  // the two grouped inputs' E4M3 copies (half an element each), the SwiGLU input (2 F) and the
  // expert output (d).
  const double rows = (65536.0 + 1024.0) / 8192.0;
  CHECK(kept == Approx(2 * 2048 + rows * (0.5 * (2048 + 1024) + 2 * 1024 + 2048)));
  c.train.recompute = Recompute::kMlp;
  CHECK(plan::moe_kept_per_token(c) == 0.0);
}
