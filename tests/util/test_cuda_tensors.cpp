// lib/util/cuda_tensors.h FP8T_KERNEL_CHECK with kernels/precondition.cu, on the host (no GPU
// needed): a launcher refuses a call before it touches the device, and the host check turns the
// status into an fp8t::Error naming the op, the shapes and the failed precondition.
#if defined(FP8T_WITH_CUDA)

#include "lib/util/cuda_tensors.h"

#include <functional>  // std::function
#include <string>      // std::string

#include "fp8t_kernels.h"  // the launchers
#include "tests/catch.h"

namespace {

// Stand-ins for device buffers: every call below fails a precondition before any device work,
// so they are never dereferenced.
alignas(16) float fake[16];
uint8_t* const fake_codes = reinterpret_cast<uint8_t*>(fake);

struct Thrown {
  std::string message;
  fp8t::ExitCode code = fp8t::ExitCode::kOk;
};

Thrown thrown_by(const std::function<void()>& f) {
  try {
    f();
  } catch (const fp8t::Error& e) {
    return {e.what(), e.code()};
  }
  return {};
}

}  // namespace

TEST_CASE("kernel check: a shape the grid cannot hold names the op, the shape and the check", "[util]") {
  const int64_t rows = 64 * 65535 + 1, cols = 8;  // one row tile more than gridDim.y allows
  const Thrown t = thrown_by([&] {
    FP8T_KERNEL_CHECK(fp8t_cast_transpose(fake, FP8T_DTYPE_F32, rows, cols, fake, FP8T_FORMAT_E4M3, nullptr, nullptr,
                                          nullptr, nullptr, nullptr),
                      "fp8 cast+transpose of [", rows, ", ", cols, "]");
  });
  INFO(t.message);
  REQUIRE(t.code == fp8t::ExitCode::kFailure);
  REQUIRE_THAT(t.message, FP8T_CONTAINS("fp8 cast+transpose of [4194241, 8]: precondition failed: "));
  REQUIRE_THAT(t.message, FP8T_CONTAINS("fp8t_cast_transpose: rows need more than 65535 tiles of 64"));
  REQUIRE_THAT(t.message, FP8T_CONTAINS("(failed check: n_tiles(rows) <= kMaxRowTiles)"));
}

TEST_CASE("kernel check: alignment and dtype preconditions say which one failed", "[util]") {
  const Thrown misaligned = thrown_by([&] {
    FP8T_KERNEL_CHECK(fp8t_norm_backward(fake, FP8T_DTYPE_F32, fake, FP8T_DTYPE_F32, 4, 16, fake, fake, fake, 0, fake,
                                         fake, nullptr, fake + 1, nullptr),
                      "LayerNorm backward of [4, 16]");
  });
  INFO(misaligned.message);
  REQUIRE_THAT(misaligned.message, FP8T_CONTAINS("LayerNorm backward of [4, 16]: precondition failed: "
                                                 "fp8t_norm_backward: the workspace is not 16-byte aligned"));

  const Thrown bad_dtype = thrown_by([&] {
    FP8T_KERNEL_CHECK(fp8t_cast(fake, 7, 16, fake, FP8T_FORMAT_E4M3, fake_codes, nullptr, nullptr, nullptr),
                      "fp8 cast of [16]");
  });
  INFO(bad_dtype.message);
  REQUIRE_THAT(bad_dtype.message, FP8T_CONTAINS("fp8t_cast: the input dtype is not fp32 or bf16 "
                                                "(failed check: valid_dtype(x_dtype))"));
}

TEST_CASE("kernel check: a later call forgets the failure; other errors stay CUDA errors", "[util]") {
  REQUIRE(fp8t_cast(fake, FP8T_DTYPE_F32, -1, fake, FP8T_FORMAT_E4M3, nullptr, nullptr, nullptr, nullptr) ==
          cudaErrorInvalidValue);
  REQUIRE_THAT(std::string(fp8t_last_precondition()), FP8T_CONTAINS("the element count is negative"));
  // An empty transpose passes its checks and returns before any device work.
  REQUIRE(fp8t_transpose_codes(nullptr, 0, 0, nullptr, nullptr) == cudaSuccess);
  REQUIRE(std::string(fp8t_last_precondition()).empty());
  // cudaErrorInvalidValue without a recorded precondition (e.g. from the runtime) is reported as such.
  const Thrown t = thrown_by([] { FP8T_KERNEL_CHECK(cudaErrorInvalidValue, "some op"); });
  REQUIRE_THAT(t.message, FP8T_CONTAINS("some op: CUDA error cudaErrorInvalidValue"));
}

#endif  // FP8T_WITH_CUDA
