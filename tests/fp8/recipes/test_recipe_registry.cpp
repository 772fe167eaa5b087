// The recipes' registry of state classes (lib/fp8/recipes/registry.cpp) and the queries that
// lib/dist and lib/train ask a recipe instead of switching on its kind: every registered recipe
// builds its own state class, and the ZeRO-3 gather rules (weight_parts, part_scale_floats,
// flat_part_scales, gathered_scale_inv) answer as lib/dist/fp8_gather.cpp's switches on
// ScaleLayout did, checked on the CPU emulation against casts of the whole weight.
#include <ATen/ATen.h>  // at::Tensor

#include <string>   // std::string
#include <utility>  // std::pair
#include <vector>   // std::vector

#include "lib/fp8/recipes/scaling.h"          // make_scaling, Scaling
#include "lib/numerics/block_math.h"          // blk128_scale_rows, blk128_scale_stride
#include "tests/catch.h"

using namespace fp8t;
using fp8::RecipeKind;
using fp8::ScaleLayout;
using fp8::TensorRole;

namespace {

fp8::Recipe recipe_of(RecipeKind kind) {
  fp8::Recipe r;
  r.kind = kind;
  return r;
}

// A state class of `kind` with one weight slot, on the CPU.
std::shared_ptr<fp8::Scaling> weight_scaling(RecipeKind kind) {
  auto s = fp8::make_scaling(recipe_of(kind));
  s->add_slot("fc:weight", TensorRole::kWeight);
  s->finalize(at::kCPU);
  return s;
}

fp8::Fp8Operand cast_rowwise(fp8::Scaling& s, const at::Tensor& w, const at::Tensor& scale = at::Tensor()) {
  fp8::CastOptions opt;
  opt.rowwise = true;
  opt.columnwise = false;
  opt.record = !scale.defined();
  opt.scale = scale;
  return s.quantize(0, fp8::CastSource::tensor(w), opt).rowwise;
}

}  // namespace

TEST_CASE("recipe registry: every registered recipe builds its own state class", "[fp8]") {
  for (const fp8::RecipeTraits& t : fp8::recipe_registry()) {
    INFO("fp8.recipe " << t.name);
    const auto s = fp8::make_scaling(recipe_of(t.kind));
    REQUIRE(s != nullptr);
    CHECK(s->kind() == t.kind);
    CHECK(&s->traits() == &t);
    CHECK(std::string(s->traits().name) == fp8::to_string(t.kind));
  }
}

TEST_CASE("recipe registry: the ZeRO-3 part rules are the old switches' per recipe", "[fp8]") {
  const auto delayed = fp8::make_scaling(recipe_of(RecipeKind::kDelayed));
  const auto current = fp8::make_scaling(recipe_of(RecipeKind::kCurrent));
  const auto block = fp8::make_scaling(recipe_of(RecipeKind::kBlock));
  CHECK(delayed->weight_parts().row_multiple == 0);
  CHECK_FALSE(delayed->weight_parts().whole_amax);
  CHECK(delayed->weight_parts().scale_layout == ScaleLayout::kTensor);
  CHECK(current->weight_parts().row_multiple == 0);
  CHECK(current->weight_parts().whole_amax);
  CHECK(current->weight_parts().scale_layout == ScaleLayout::kTensor);
  CHECK(block->weight_parts().row_multiple == 128);
  CHECK_FALSE(block->weight_parts().whole_amax);
  CHECK(block->weight_parts().scale_layout == ScaleLayout::kBlock128x128);
  // A part's scale floats: one per-tensor scale; block: its grid rows x the padded grid stride.
  CHECK(delayed->part_scale_floats(200, 300) == 1);
  CHECK(current->part_scale_floats(200, 300) == 1);
  CHECK(block->part_scale_floats(200, 300) == 2 * 4);    // 2 row blocks, ceil(300/128) = 3 padded to 4
  CHECK(block->part_scale_floats(128, 1024) == 1 * 8);   // 1 row block, 8 column blocks
  CHECK(block->part_scale_floats(256, 128) == fp8::blk128_scale_rows(256) * fp8::blk128_scale_stride(128));
}

TEST_CASE("recipe registry: per-tensor parts gather to the first owner's scale", "[fp8]") {
  for (const RecipeKind kind : {RecipeKind::kDelayed, RecipeKind::kCurrent}) {
    INFO(fp8::to_string(kind));
    auto s = weight_scaling(kind);
    const at::Tensor w = at::randn({8, 16}, at::kFloat);
    const fp8::Fp8Operand q = cast_rowwise(*s, w.reshape({1, -1}));
    REQUIRE(q.scale_layout == ScaleLayout::kTensor);
    const at::Tensor flat = s->flat_part_scales(q, 1);
    REQUIRE(flat.sizes() == at::IntArrayRef{1});
    CHECK(flat.item<float>() == q.scale_inv.item<float>());
    // Two owners' scales side by side in a gathered buffer: the weight's is a 0-d view of the first.
    const at::Tensor gathered = at::tensor({0.0f, 0.5f, 0.0f, 0.0f, 0.5f}, at::kFloat);
    const at::Tensor inv = s->gathered_scale_inv(8, 16, {gathered.narrow(0, 1, 1), gathered.narrow(0, 4, 1)});
    CHECK(inv.dim() == 0);
    CHECK(inv.item<float>() == 0.5f);
    CHECK(inv.data_ptr() == gathered.narrow(0, 1, 1).data_ptr());
  }
}

TEST_CASE("recipe registry: block parts of 128-row bands gather to the whole weight's scale grid", "[fp8]") {
  auto s = weight_scaling(RecipeKind::kBlock);
  at::manual_seed(7);
  const int64_t rows = 300, cols = 200;  // bands of 128, 128 and 44 rows; 2 column blocks (stride 4)
  // Each band its own magnitude, so that the bands' scales differ and a wrong order shows.
  const at::Tensor w = at::randn({rows, cols}, at::kFloat) *
                       at::cat({at::full({128, 1}, 1.0f), at::full({128, 1}, 8.0f), at::full({44, 1}, 0.125f)});
  const fp8::Fp8Operand whole = cast_rowwise(*s, w);
  REQUIRE(whole.scale_layout == ScaleLayout::kBlock128x128);
  std::vector<at::Tensor> owners;
  for (const auto& [begin, length] : std::vector<std::pair<int64_t, int64_t>>{{0, 128}, {128, 128}, {256, 44}}) {
    const fp8::Fp8Operand part = cast_rowwise(*s, w.narrow(0, begin, length));
    const int64_t count = s->part_scale_floats(length, cols);
    const at::Tensor flat = s->flat_part_scales(part, count);
    REQUIRE(flat.numel() == count);
    owners.push_back(flat.clone());
  }
  CHECK_FALSE(at::equal(owners[0], owners[1]));
  const at::Tensor grid = s->gathered_scale_inv(rows, cols, owners);
  // Exact: each band's 128x128 blocks find their scales in the rows the band holds.
  CHECK(grid.sizes() == whole.scale_inv.sizes());
  CHECK(grid.strides() == whole.scale_inv.strides());
  CHECK(grid.size(0) == fp8::blk128_scale_rows(rows));
  CHECK(at::equal(grid, whole.scale_inv));
}
