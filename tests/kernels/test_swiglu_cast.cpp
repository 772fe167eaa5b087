// kernels/swiglu_cast.cu: the SwiGLU forward and backward fused into the FP8 casts give, bit for
// bit, the codes, amax and dbias of casting what the CPU emulation computes (the unfused
// at::silu(gate) * up and its autograd), without writing it in high precision.
#if defined(FP8T_WITH_CUDA)

#include <ATen/cuda/CUDAContext.h>  // at::cuda::getCurrentCUDAStream

#include <cmath>       // std::ldexp
#include <cstdio>      // std::printf
#include <cstring>     // std::strstr
#include <functional>  // std::function
#include <limits>      // std::numeric_limits
#include <vector>      // std::vector

#include "fp8t_kernels.h"                  // fp8t_swiglu_cast_transpose, fp8t_dswiglu_cast_transpose, fp8t_cast_transpose_dbias
#include "tests/fp8/swiglu_test_util.h"    // unfused_swiglu*, math_swiglu*, bit_diff
#include "tests/kernels/cuda_test_util.h"  // FP8T_REQUIRE_GPU, host_encode, host_amax, require_same_codes

namespace {

using fp8t::fp8::Format;
using namespace fp8t::test;

// [rows, F] (h is [rows, 2F]): tiny, scalar edges (F and rows not multiples of 8), one tile,
// partial edge tiles, rows = 0, and large ones (several row and column tiles, vector path). The
// bf16 casts without dbias run the 128x64 tiled kernel, whose vector path needs whole tiles and
// rows a multiple of 16: {256, 192} is whole tiles only, {2064, 2112} whole tiles and a partial
// last row of tiles.
const std::vector<std::pair<int64_t, int64_t>> kShapes = {{1, 16},    {13, 7},    {64, 64},     {100, 72},
                                                          {60, 160},  {217, 256}, {130, 200},   {0, 16},
                                                          {256, 192}, {2056, 2080}, {2064, 2112}};

int dtype_code(at::ScalarType t) { return t == at::kFloat ? FP8T_DTYPE_F32 : FP8T_DTYPE_BF16; }
int format_code(Format f) { return f == Format::kE4M3 ? FP8T_FORMAT_E4M3 : FP8T_FORMAT_E5M2; }

// h = [gate | up] ~ 3 * N(0, 1), with zeros, huge and saturating values sprinkled in.
at::Tensor make_h(int64_t rows, int64_t f, at::ScalarType dt) {
  at::manual_seed(rows * 131 + f);
  at::Tensor h = at::randn({rows, 2 * f}) * 3.0;
  if (h.numel() > 0) {
    h.view({-1}).slice(0, 0, h.numel(), 13).zero_();
    h.view({-1}).slice(0, 5, h.numel(), 101).mul_(40.0);
  }
  return h.to(dt);
}

// dy spread over 2^-8 .. 2^8 (gradients span binades), some zeros.
at::Tensor make_dy(int64_t rows, int64_t f, at::ScalarType dt) {
  at::manual_seed(rows * 7 + f * 3 + 1);
  at::Tensor dy = at::randn({rows, f}) * at::pow(2.0, at::randint(-8, 8, {rows, f}));
  if (dy.numel() > 0) dy.view({-1}).slice(0, 0, dy.numel(), 11).zero_();
  return dy.to(dt);
}

// Whether ATen's CPU silu runs only whole vectors on one thread for a [rows, F] half of h (F a
// multiple of 64, at most 16384 elements): then the CPU emulation's unfused result is itself the
// reference, and must equal swiglu_math.h's (tests/numerics/test_swiglu_math.cpp shows why).
bool emulation_is_vectorised(int64_t rows, int64_t f) {
  return aten_cpu_uses_vector_exp() && f % 64 == 0 && rows * f <= 16384;
}

// The CPU reference of a result: swiglu_math.h on the host, checked against the CPU emulation
// (the unfused LibTorch composition) where ATen's kernel is vectorised throughout.
at::Tensor reference(const at::Tensor& math, const at::Tensor& emulation, int64_t rows, int64_t f) {
  if (emulation_is_vectorised(rows, f)) {
    const BitDiff d = bit_diff(math, emulation);
    INFO("CPU emulation vs swiglu_math.h: " << d.count << " elements differ, first at " << d.first);
    REQUIRE(d.count == 0);
  }
  return math;
}

struct Outputs {
  at::Tensor row, col, amax, scale_inv;
};

Outputs sentinel_outputs(int64_t rows, int64_t width) {
  return {at::full({rows, width}, 0xAB, on_cuda(at::kByte)), at::full({width, rows}, 0xCD, on_cuda(at::kByte)),
          at::full({}, 0.125f, on_cuda(at::kFloat)), at::full({}, -1.0f, on_cuda(at::kFloat))};
}

void require_outputs(const Outputs& o, const at::Tensor& want, float scale, Format f) {
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  require_same_codes(o.row, host_encode(want, scale, f), want, scale);
  const at::Tensor want_t = want.t().contiguous();
  require_same_codes(o.col, host_encode(want_t, scale, f), want_t, scale);
  REQUIRE(same_bits(o.amax.item<float>(), host_amax(want, 0.125f)));
  REQUIRE(same_bits(o.scale_inv.item<float>(), 1.0f / scale));
}

// dbias of the fused backward: the unfused path's gradient cast (fp8t_cast_transpose_dbias) of the
// same gradient sums in the same order, so the two agree bit for bit; and both are within the FP32
// summation bound of the exact column sums (64 + ceil(rows / 64) terms in sequence, as in the
// cast_transpose_dbias test).
void require_dbias(const at::Tensor& dbias, const at::Tensor& want, const at::Tensor& scale, Format fmt) {
  const int64_t rows = want.size(0), cols = want.size(1);
  const cudaStream_t s = at::cuda::getCurrentCUDAStream().stream();
  const at::Tensor wg = want.cuda();
  at::Tensor dbias_ref = at::full({cols}, -9.0f, on_cuda(at::kFloat));
  at::Tensor codes = at::empty({rows, cols}, on_cuda(at::kByte));
  at::Tensor ws = at::empty({static_cast<int64_t>(fp8t_cast_transpose_dbias_workspace_bytes(rows, cols))},
                            on_cuda(at::kByte));
  REQUIRE(fp8t_cast_transpose_dbias(wg.data_ptr(), dtype_code(want.scalar_type()), rows, cols, scale.data_ptr<float>(),
                                    format_code(fmt), codes.data_ptr<uint8_t>(), nullptr, nullptr, nullptr,
                                    dbias_ref.data_ptr<float>(), ws.data_ptr(), s) == cudaSuccess);
  const BitDiff d = bit_diff(dbias.cpu(), dbias_ref.cpu());
  INFO("dbias: " << d.count << " of " << cols << " differ from cast_transpose_dbias's, first at " << d.first);
  REQUIRE(d.count == 0);
  const at::Tensor wd = want.to(at::kDouble);
  const at::Tensor bound = wd.abs().sum(0) * ((64.0 + (rows + 63) / 64) * std::ldexp(1.0, -24)) + 1e-30;
  const at::Tensor err = (dbias.cpu().to(at::kDouble) - wd.sum(0)).abs();
  REQUIRE((err <= bound).logical_or(wd.sum(0).isnan()).all().item<bool>());
}

}  // namespace

TEST_CASE("swiglu cast: forward codes (both layouts), amax and scale_inv bit-exact against the CPU emulation",
          "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  const cudaStream_t s = at::cuda::getCurrentCUDAStream().stream();
  for (Format fmt : {Format::kE4M3, Format::kE5M2}) {
    for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
      for (const auto& [rows, f] : kShapes) {
        if (skip_large(rows * f)) continue;
        CAPTURE(fp8t::fp8::format_name(fmt), dtype_name(dt), rows, f);
        const float scale = fmt == Format::kE4M3 ? 16.0f : 512.0f;
        const at::Tensor h = make_h(rows, f, dt);
        const at::Tensor want = reference(math_swiglu(h), unfused_swiglu(h), rows, f);
        const at::Tensor hg = h.cuda();
        const at::Tensor scale_t = at::full({}, scale, on_cuda(at::kFloat));
        Outputs o = sentinel_outputs(rows, f);
        REQUIRE(fp8t_swiglu_cast_transpose(hg.data_ptr(), dtype_code(dt), rows, f, scale_t.data_ptr<float>(),
                                           format_code(fmt), o.row.data_ptr<uint8_t>(), o.col.data_ptr<uint8_t>(),
                                           o.amax.data_ptr<float>(), o.scale_inv.data_ptr<float>(), s) == cudaSuccess);
        require_outputs(o, want, scale, fmt);

        // Amax only (current scaling's first pass): no codes, no scale, the same amax.
        at::Tensor amax_only = at::full({}, 0.125f, on_cuda(at::kFloat));
        REQUIRE(fp8t_swiglu_cast_transpose(hg.data_ptr(), dtype_code(dt), rows, f, nullptr, format_code(fmt), nullptr,
                                           nullptr, amax_only.data_ptr<float>(), nullptr, s) == cudaSuccess);
        REQUIRE(same_bits(amax_only.item<float>(), o.amax.item<float>()));
      }
    }
  }
}

TEST_CASE("swiglu cast: backward codes (both layouts) and amax bit-exact against the CPU emulation, dbias "
          "bit-equal to cast_transpose_dbias of the gradient",
          "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  const cudaStream_t s = at::cuda::getCurrentCUDAStream().stream();
  for (Format fmt : {Format::kE5M2, Format::kE4M3}) {
    for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
      for (const auto& [rows, f] : kShapes) {
        if (skip_large(rows * f)) continue;
        CAPTURE(fp8t::fp8::format_name(fmt), dtype_name(dt), rows, f);
        const float scale = fmt == Format::kE5M2 ? 1024.0f : 64.0f;
        const at::Tensor h = make_h(rows, f, dt), dy = make_dy(rows, f, dt);
        const at::Tensor want = reference(math_swiglu_backward(dy, h), unfused_swiglu_backward(dy, h), rows, f);
        const at::Tensor hg = h.cuda(), dyg = dy.cuda();
        const at::Tensor scale_t = at::full({}, scale, on_cuda(at::kFloat));
        Outputs o = sentinel_outputs(rows, 2 * f);
        at::Tensor dbias = at::full({2 * f}, -7.0f, on_cuda(at::kFloat));
        at::Tensor ws = at::empty({static_cast<int64_t>(fp8t_dswiglu_cast_transpose_workspace_bytes(rows, f))},
                                  on_cuda(at::kByte));
        REQUIRE(fp8t_dswiglu_cast_transpose(dyg.data_ptr(), hg.data_ptr(), dtype_code(dt), rows, f,
                                            scale_t.data_ptr<float>(), format_code(fmt), o.row.data_ptr<uint8_t>(),
                                            o.col.data_ptr<uint8_t>(), o.amax.data_ptr<float>(),
                                            o.scale_inv.data_ptr<float>(), dbias.data_ptr<float>(), ws.data_ptr(),
                                            s) == cudaSuccess);
        require_outputs(o, want, scale, fmt);
        require_dbias(dbias, want, scale_t, fmt);

        // Without dbias (bf16: the tiled kernel): the same codes and amax.
        Outputs o2 = sentinel_outputs(rows, 2 * f);
        REQUIRE(fp8t_dswiglu_cast_transpose(dyg.data_ptr(), hg.data_ptr(), dtype_code(dt), rows, f,
                                            scale_t.data_ptr<float>(), format_code(fmt), o2.row.data_ptr<uint8_t>(),
                                            o2.col.data_ptr<uint8_t>(), o2.amax.data_ptr<float>(),
                                            o2.scale_inv.data_ptr<float>(), nullptr, nullptr, s) == cudaSuccess);
        require_outputs(o2, want, scale, fmt);

        // Amax only (current scaling's first pass): no codes, no scale, the same amax.
        at::Tensor amax_only = at::full({}, 0.125f, on_cuda(at::kFloat));
        REQUIRE(fp8t_dswiglu_cast_transpose(dyg.data_ptr(), hg.data_ptr(), dtype_code(dt), rows, f, nullptr,
                                            format_code(fmt), nullptr, nullptr, amax_only.data_ptr<float>(), nullptr,
                                            nullptr, nullptr, s) == cudaSuccess);
        REQUIRE(same_bits(amax_only.item<float>(), o.amax.item<float>()));
      }
    }
  }
}

TEST_CASE("swiglu cast: every bf16 gate (the silu table and its closed forms) gives the CPU emulation's codes and "
          "amax, forward and backward",
          "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  const cudaStream_t s = at::cuda::getCurrentCUDAStream().stream();
  const int64_t f = 256, rows = 65536 / f;  // whole 128x64 tiles: the tiled kernel's vector path
  const at::Tensor h = every_bf16_gate_h(f), dy = every_bf16_gate_dy(f);
  const at::Tensor hg = h.cuda(), dyg = dy.cuda();
  const at::Tensor scale_t = at::full({}, 8.0f, on_cuda(at::kFloat));
  for (const bool backward : {false, true}) {
    CAPTURE(backward);
    const at::Tensor want = backward ? math_swiglu_backward(dy, h) : math_swiglu(h);
    const Format fmt = backward ? Format::kE5M2 : Format::kE4M3;
    Outputs o = sentinel_outputs(rows, want.size(1));
    REQUIRE((backward ? fp8t_dswiglu_cast_transpose(dyg.data_ptr(), hg.data_ptr(), FP8T_DTYPE_BF16, rows, f,
                                                    scale_t.data_ptr<float>(), format_code(fmt),
                                                    o.row.data_ptr<uint8_t>(), o.col.data_ptr<uint8_t>(),
                                                    o.amax.data_ptr<float>(), o.scale_inv.data_ptr<float>(), nullptr,
                                                    nullptr, s)
                      : fp8t_swiglu_cast_transpose(hg.data_ptr(), FP8T_DTYPE_BF16, rows, f, scale_t.data_ptr<float>(),
                                                   format_code(fmt), o.row.data_ptr<uint8_t>(),
                                                   o.col.data_ptr<uint8_t>(), o.amax.data_ptr<float>(),
                                                   o.scale_inv.data_ptr<float>(), s)) == cudaSuccess);
    require_outputs(o, want, 8.0f, fmt);
  }
}

TEST_CASE("swiglu cast: NaN and infinite inputs give format.h's NaN code and an amax without the NaNs, as on the CPU",
          "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  const cudaStream_t s = at::cuda::getCurrentCUDAStream().stream();
  const float kNaN = std::numeric_limits<float>::quiet_NaN(), kInf = std::numeric_limits<float>::infinity();
  // {256, 192}: the tiled kernel's vector path (bf16), {13, 7}: scalar accesses, {130, 200}: partial tiles.
  for (const auto& [rows, f] : std::vector<std::pair<int64_t, int64_t>>{{256, 192}, {13, 7}, {130, 200}}) {
    for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
      CAPTURE(dtype_name(dt), rows, f);
      at::Tensor h = make_h(rows, f, at::kFloat);
      h.view({-1}).slice(0, 3, h.numel(), 97).fill_(kNaN);
      h.view({-1}).slice(0, 41, h.numel(), 89).fill_(kInf);
      h.view({-1}).slice(0, 43, h.numel(), 83).fill_(-kInf);
      h = h.to(dt);
      const at::Tensor dy = make_dy(rows, f, dt);
      const at::Tensor hg = h.cuda(), dyg = dy.cuda();
      const at::Tensor scale_t = at::full({}, 8.0f, on_cuda(at::kFloat));
      for (const bool backward : {false, true}) {
        CAPTURE(backward);
        const at::Tensor want = backward ? math_swiglu_backward(dy, h) : math_swiglu(h);
        REQUIRE(want.isnan().any().item<bool>());  // the repair path runs
        const Format fmt = backward ? Format::kE5M2 : Format::kE4M3;
        Outputs o = sentinel_outputs(rows, want.size(1));
        REQUIRE((backward ? fp8t_dswiglu_cast_transpose(dyg.data_ptr(), hg.data_ptr(), dtype_code(dt), rows, f,
                                                        scale_t.data_ptr<float>(), format_code(fmt),
                                                        o.row.data_ptr<uint8_t>(), o.col.data_ptr<uint8_t>(),
                                                        o.amax.data_ptr<float>(), o.scale_inv.data_ptr<float>(),
                                                        nullptr, nullptr, s)
                          : fp8t_swiglu_cast_transpose(hg.data_ptr(), dtype_code(dt), rows, f,
                                                       scale_t.data_ptr<float>(), format_code(fmt),
                                                       o.row.data_ptr<uint8_t>(), o.col.data_ptr<uint8_t>(),
                                                       o.amax.data_ptr<float>(), o.scale_inv.data_ptr<float>(), s)) ==
                cudaSuccess);
        require_outputs(o, want, 8.0f, fmt);
      }
    }
  }
}

TEST_CASE("swiglu cast: precondition violations return cudaErrorInvalidValue and are named", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  const cudaStream_t s = at::cuda::getCurrentCUDAStream().stream();
  const at::Tensor h = at::ones({16, 32}, on_cuda(at::kFloat));
  const at::Tensor scale = at::ones({}, on_cuda(at::kFloat));
  at::Tensor codes = at::empty({16, 32}, on_cuda(at::kByte));
  at::Tensor dbias = at::empty({32}, on_cuda(at::kFloat));
  REQUIRE(fp8t_swiglu_cast_transpose(h.data_ptr(), FP8T_DTYPE_F32, 16, 16, nullptr, FP8T_FORMAT_E4M3,
                                     codes.data_ptr<uint8_t>(), nullptr, nullptr, nullptr, s) == cudaErrorInvalidValue);
  REQUIRE(std::strstr(fp8t_last_precondition(), "fp8t_swiglu_cast_transpose: no scale for an FP8 output") !=
          nullptr);
  REQUIRE(fp8t_dswiglu_cast_transpose(nullptr, h.data_ptr(), FP8T_DTYPE_F32, 16, 16, scale.data_ptr<float>(),
                                      FP8T_FORMAT_E5M2, codes.data_ptr<uint8_t>(), nullptr, nullptr, nullptr, nullptr,
                                      nullptr, s) == cudaErrorInvalidValue);
  REQUIRE(std::strstr(fp8t_last_precondition(), "no incoming gradient dy") != nullptr);
  REQUIRE(fp8t_dswiglu_cast_transpose(h.data_ptr(), h.data_ptr(), FP8T_DTYPE_F32, 16, 16, scale.data_ptr<float>(),
                                      FP8T_FORMAT_E5M2, codes.data_ptr<uint8_t>(), nullptr, nullptr, nullptr,
                                      dbias.data_ptr<float>(), nullptr, s) == cudaErrorInvalidValue);
  REQUIRE(std::strstr(fp8t_last_precondition(), "dbias needs a workspace") != nullptr);
  REQUIRE(fp8t_dswiglu_cast_transpose_workspace_bytes(130, 100) == 3 * 200 * sizeof(float));
}

TEST_CASE("swiglu cast: LLaMA-1B MLP size [8192, 8192] bf16 (timing with FP8T_TEST_REPORT)", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  const int64_t rows = 8192, f = 8192;
  if (!reporting()) SKIP("a timing case: it runs with FP8T_TEST_REPORT=1");
  if (skip_large(rows * f)) SKIP("too large under compute-sanitizer (FP8T_TEST_SMALL)");
  const cudaStream_t s = at::cuda::getCurrentCUDAStream().stream();
  const at::Tensor h = (at::randn({rows, 2 * f}, on_cuda(at::kFloat)) * 3.0).to(at::kBFloat16);
  const at::Tensor dy = at::randn({rows, f}, on_cuda(at::kFloat)).to(at::kBFloat16);
  const at::Tensor scale = at::ones({}, on_cuda(at::kFloat));
  at::Tensor amax = at::zeros({}, on_cuda(at::kFloat)), sinv = at::zeros({}, on_cuda(at::kFloat));
  at::Tensor row = at::empty({rows, 2 * f}, on_cuda(at::kByte)), col = at::empty({2 * f, rows}, on_cuda(at::kByte));
  at::Tensor dbias = at::empty({2 * f}, on_cuda(at::kFloat));
  at::Tensor ws = at::empty({static_cast<int64_t>(fp8t_dswiglu_cast_transpose_workspace_bytes(rows, f))},
                            on_cuda(at::kByte));
  auto forward = [&] {
    return fp8t_swiglu_cast_transpose(h.data_ptr(), FP8T_DTYPE_BF16, rows, f, scale.data_ptr<float>(),
                                      FP8T_FORMAT_E4M3, row.data_ptr<uint8_t>(), col.data_ptr<uint8_t>(),
                                      amax.data_ptr<float>(), sinv.data_ptr<float>(), s);
  };
  auto backward = [&](bool with_dbias) {
    return [&, with_dbias] {
      return fp8t_dswiglu_cast_transpose(dy.data_ptr(), h.data_ptr(), FP8T_DTYPE_BF16, rows, f,
                                         scale.data_ptr<float>(), FP8T_FORMAT_E5M2, row.data_ptr<uint8_t>(),
                                         col.data_ptr<uint8_t>(), amax.data_ptr<float>(), sinv.data_ptr<float>(),
                                         with_dbias ? dbias.data_ptr<float>() : nullptr,
                                         with_dbias ? ws.data_ptr() : nullptr, s);
    };
  };
  // A plain cast+transpose of the same h, for the bandwidth a pure copy-like kernel reaches.
  auto plain = [&] {
    return fp8t_cast_transpose(h.data_ptr(), FP8T_DTYPE_BF16, rows, 2 * f, scale.data_ptr<float>(), FP8T_FORMAT_E4M3,
                               row.data_ptr<uint8_t>(), col.data_ptr<uint8_t>(), amax.data_ptr<float>(),
                               sinv.data_ptr<float>(), s);
  };
  // Current scaling's two passes each way: the amax pass alone, then the fused cast (as before
  // fp8t_swiglu_amax_scale_value), against the amax pass that writes the value, then the plain
  // cast of that value.
  at::Tensor cur_scale = at::ones({}, on_cuda(at::kFloat)), cur_sinv = at::ones({}, on_cuda(at::kFloat));
  at::Tensor amax_ws = at::zeros({2}, on_cuda(at::kInt));
  auto* aws = reinterpret_cast<unsigned int*>(amax_ws.data_ptr<int32_t>());
  at::Tensor value = at::empty({rows, 2 * f}, on_cuda(at::kBFloat16));
  auto current = [&](bool bwd, bool with_value) {
    return [&, bwd, with_value]() -> cudaError_t {
      const int64_t width = bwd ? 2 * f : f;
      float* cs = cur_scale.data_ptr<float>();
      float* csi = cur_sinv.data_ptr<float>();
      cudaError_t e = with_value ? fp8t_swiglu_amax_scale_value(bwd ? 1 : 0, dy.data_ptr(), h.data_ptr(),
                                                                FP8T_DTYPE_BF16, rows, f, value.data_ptr(),
                                                                amax.data_ptr<float>(), aws, 448.0f, 1.0f, cs, csi, s)
                                 : fp8t_amax_scale(bwd ? FP8T_ACT_DSWIGLU : FP8T_ACT_SWIGLU,
                                                   bwd ? dy.data_ptr() : h.data_ptr(), bwd ? h.data_ptr() : nullptr,
                                                   FP8T_DTYPE_BF16, rows, f, amax.data_ptr<float>(), aws, 448.0f, 1.0f,
                                                   cs, csi, s);
      if (e != cudaSuccess) return e;
      if (with_value) {
        return fp8t_cast_transpose(value.data_ptr(), FP8T_DTYPE_BF16, rows, width, cur_scale.data_ptr<float>(),
                                   FP8T_FORMAT_E4M3, row.data_ptr<uint8_t>(), col.data_ptr<uint8_t>(),
                                   amax.data_ptr<float>(), sinv.data_ptr<float>(), s);
      }
      return bwd ? backward(false)() : forward();
    };
  };
  const double n = static_cast<double>(rows * f);
  // Bytes moved: forward reads 2n bf16 and writes 2 x n codes; backward reads 3n bf16 and writes
  // 2 x 2n codes; the plain cast reads 2n bf16 and writes 2 x 2n codes. Current's passes: the amax
  // pass reads the inputs again (forward 4n, backward 6n bytes); with the value it also writes it
  // (2n, 4n) and the cast reads it (2n, 4n) instead of the inputs.
  const struct {
    const char* name;
    std::function<cudaError_t()> run;
    double bytes;
  } cases[] = {{"swiglu forward (tiled)", forward, 4 * n + 2 * n},
               {"swiglu backward (tiled, no dbias)", backward(false), 6 * n + 4 * n},
               {"swiglu backward+dbias (64x64)", backward(true), 6 * n + 4 * n},
               {"plain cast_transpose of h", plain, 4 * n + 4 * n},
               {"current forward: amax pass + fused cast", current(false, false), 4 * n + 4 * n + 2 * n},
               {"current forward: amax pass with value + plain cast", current(false, true),
                4 * n + 2 * n + 2 * n + 2 * n},
               {"current backward: amax pass + fused cast", current(true, false), 6 * n + 6 * n + 4 * n},
               {"current backward: amax pass with value + plain cast", current(true, true),
                6 * n + 4 * n + 4 * n + 4 * n}};
  for (const auto& c : cases) {
    REQUIRE(c.run() == cudaSuccess);  // warm-up
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    constexpr int kIters = 20;
    cudaEventRecord(e0, s);
    for (int i = 0; i < kIters; ++i) REQUIRE(c.run() == cudaSuccess);
    cudaEventRecord(e1, s);
    REQUIRE(cudaEventSynchronize(e1) == cudaSuccess);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, e0, e1);
    ms /= kIters;
    std::printf("%s bf16 [%ld, %ld]: %.3f ms, %.0f GB/s\n", c.name, static_cast<long>(rows), static_cast<long>(f), ms,
                c.bytes / ms / 1e6);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
  }
}

#endif  // FP8T_WITH_CUDA
