// kernels/cross_entropy.cu through its C API: per-row loss and log-sum-exp, and the gradient,
// against float64 references computed on the host from the exact input values; in-place backward,
// unaligned rows and bases, NaN rows for out-of-range targets, preconditions; the head's
// gradients times the incoming gradient (fp8t_scale_unless_one) against ATen's mul_.
#if defined(FP8T_WITH_CUDA)

#include <ATen/cuda/CUDAContext.h>  // at::cuda::getCurrentCUDAStream

#include <algorithm>  // std::max
#include <cmath>      // std::exp, std::log, std::ldexp, std::isnan
#include <cstdio>     // std::printf
#include <limits>     // std::numeric_limits
#include <vector>     // std::vector

#include "fp8t_kernels.h"  // fp8t_cross_entropy_forward / _backward, fp8t_scale_unless_one
#include "tests/kernels/cuda_test_util.h"

namespace {

using namespace fp8t::test;

int dtype_code(at::ScalarType t) { return t == at::kFloat ? FP8T_DTYPE_F32 : FP8T_DTYPE_BF16; }
cudaStream_t current_stream() { return at::cuda::getCurrentCUDAStream().stream(); }

// Logits of GPT-like spread (N(0, 2^2)) with one hot spot per row at a column that moves from row
// to row, so the spot falls in the scalar head, the 16-byte body and the scalar tail of different
// rows: a kernel that skips any element misses a large share of some row's sum. Targets in range.
struct Problem {
  at::Tensor logits;   // CPU, [rows, vocab], the dtype under test
  at::Tensor targets;  // CPU, int64 [rows]
};

Problem make_problem(int64_t rows, int64_t vocab, at::ScalarType dt, uint64_t seed) {
  at::manual_seed(seed);
  at::Tensor x = at::randn({rows, vocab}) * 2.0;
  for (int64_t r = 0; r < rows; ++r) x[r][(r * 7919 + r / 3) % vocab] += 9.0;
  Problem p;
  p.logits = x.to(dt);
  p.targets = at::randint(0, vocab, {rows}, at::kLong);
  return p;
}

struct RowRef {
  std::vector<double> lse, loss;
};

// Float64 log-sum-exp and loss of every row, from the logits as stored (bf16 values are exact in
// float64). Out-of-range targets give NaN loss.
RowRef reference_rows(const at::Tensor& logits, const at::Tensor& targets) {
  const at::Tensor x = logits.to(at::kDouble).cpu().contiguous();
  const int64_t rows = x.size(0), vocab = x.size(1);
  const double* p = x.data_ptr<double>();
  const int64_t* t = targets.cpu().contiguous().data_ptr<int64_t>();
  RowRef ref;
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = p + r * vocab;
    double m = row[0];
    for (int64_t c = 1; c < vocab; ++c) m = std::max(m, row[c]);
    double s = 0.0;
    for (int64_t c = 0; c < vocab; ++c) s += std::exp(row[c] - m);
    const double lse = m + std::log(s);
    ref.lse.push_back(lse);
    ref.loss.push_back(t[r] >= 0 && t[r] < vocab ? lse - row[t[r]] : std::numeric_limits<double>::quiet_NaN());
  }
  return ref;
}

// Float64 gradient (softmax - onehot) * g from the exact logits, and p * |g| (p = softmax, the
// scale of the gradient's error); NaN rows for out-of-range targets.
struct GradRef {
  at::Tensor grad, p_g;
};

GradRef reference_grad(const at::Tensor& logits, const at::Tensor& targets, const RowRef& ref, double g) {
  const at::Tensor x = logits.to(at::kDouble).cpu().contiguous();
  const int64_t rows = x.size(0), vocab = x.size(1);
  GradRef out;
  out.grad = at::empty({rows, vocab}, at::kDouble);
  out.p_g = at::empty({rows, vocab}, at::kDouble);
  const double* p = x.data_ptr<double>();
  double* o = out.grad.data_ptr<double>();
  double* pg = out.p_g.data_ptr<double>();
  const int64_t* t = targets.cpu().contiguous().data_ptr<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    const bool valid = t[r] >= 0 && t[r] < vocab;
    for (int64_t c = 0; c < vocab; ++c) {
      const int64_t i = r * vocab + c;
      const double prob = std::exp(p[i] - ref.lse[r]);
      o[i] = valid ? (prob - (c == t[r] ? 1.0 : 0.0)) * g : std::numeric_limits<double>::quiet_NaN();
      pg[i] = prob * std::fabs(g);
    }
  }
  return out;
}

// Forward tolerance (absolute, on lse and loss, values of about 5 to 25). FP32 arithmetic: each
// thread adds up to ~100 exponentials in sequence (50304 columns over 512 threads), each with an
// expf error of ~2 ulp, then log2(512) pairwise combines: the sum's relative error is bounded by
// ~(100 + 9 + 2) * 2^-24 = 6.6e-6, which log() turns into the same absolute error; m + log(s) and
// log(s) - (x[t] - m) add half an ulp of a value below 32 (1e-6). 1e-5 covers the worst case; the
// hot spot (exp(9) ~ 8e3 times a typical term, a few percent of a 50304-wide row's sum and most
// of a short row's) moves lse far beyond it if it is missed.
constexpr double kForwardAbsTol = 1e-5;

// Max over valid rows of |got - want| / tol; NaN where exactly one of them is NaN counts as +inf.
double worst_rows(const at::Tensor& got_gpu, const std::vector<double>& want, double tol) {
  const at::Tensor got = got_gpu.to(at::kDouble).cpu().contiguous();
  const double* g = got.data_ptr<double>();
  double worst_ratio = 0.0;
  for (size_t r = 0; r < want.size(); ++r) {
    if (std::isnan(want[r]) != std::isnan(g[r])) return std::numeric_limits<double>::infinity();
    if (!std::isnan(want[r])) worst_ratio = std::max(worst_ratio, std::fabs(g[r] - want[r]) / tol);
  }
  return worst_ratio;
}

// Backward tolerance per element. p = exp(x - lse) carries the error of lse (<= 1e-5 absolute,
// above) and of rounding x - lse to FP32 (half an ulp of a value below 32: 1e-6), plus expf's
// 2 ulp: 2e-5 * p * |g| bounds it with margin. Subtracting the one-hot adds half an ulp of 1
// (6e-8 * |g|, allowed 1e-7 * |g|). bf16 output: rounding to bf16's 8-bit significand adds at most
// half an ulp, 2^-8 relative, on top (the FP32 terms above give the margin). NaN must match NaN.
double worst_grad(const at::Tensor& got_gpu, const GradRef& want, double g, bool bf16) {
  const at::Tensor got = got_gpu.to(at::kDouble).cpu().contiguous();
  const double* a = got.data_ptr<double>();
  const double* w = want.grad.data_ptr<double>();
  const double* pg = want.p_g.data_ptr<double>();
  double worst_ratio = 0.0;
  for (int64_t i = 0; i < want.grad.numel(); ++i) {
    if (std::isnan(w[i]) != std::isnan(a[i])) return std::numeric_limits<double>::infinity();
    if (std::isnan(w[i])) continue;
    const double tol = 2e-5 * pg[i] + 1e-7 * std::fabs(g) + (bf16 ? std::ldexp(1.0, -8) * std::fabs(w[i]) : 0.0);
    worst_ratio = std::max(worst_ratio, std::fabs(a[i] - w[i]) / tol);
  }
  return worst_ratio;
}

struct ForwardOut {
  at::Tensor loss, lse;
};

ForwardOut run_forward(const at::Tensor& logits_gpu, const at::Tensor& targets_gpu, int64_t rows, int64_t vocab) {
  ForwardOut f;
  // Poisoned outputs: every row must be written.
  f.loss = at::full({rows}, -7.0f, on_cuda(at::kFloat));
  f.lse = at::full({rows}, -7.0f, on_cuda(at::kFloat));
  REQUIRE(fp8t_cross_entropy_forward(logits_gpu.data_ptr(), dtype_code(logits_gpu.scalar_type()),
                                     targets_gpu.data_ptr<int64_t>(), rows, vocab, f.loss.data_ptr<float>(),
                                     f.lse.data_ptr<float>(), current_stream()) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  return f;
}

void run_backward(const at::Tensor& logits_gpu, const at::Tensor& targets_gpu, const at::Tensor& lse,
                  const at::Tensor& grad_scale, int64_t rows, int64_t vocab, void* dlogits) {
  REQUIRE(fp8t_cross_entropy_backward(logits_gpu.data_ptr(), dtype_code(logits_gpu.scalar_type()),
                                      targets_gpu.data_ptr<int64_t>(), lse.data_ptr<float>(),
                                      grad_scale.data_ptr<float>(), rows, vocab, dlogits,
                                      current_stream()) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
}

// {rows, vocab}: vocab 1 and 65 (a warp per row, 8 rows per block; 300 rows leave a partial last
// block), 3000 (256 threads per row), 50257 (GPT-2: 512 threads, rows start at four different
// offsets within 16 bytes in bf16, two in fp32) and 50304 (padded vocab, every row aligned).
const std::vector<std::pair<int64_t, int64_t>> kShapes = {{300, 1}, {300, 65}, {45, 3000}, {19, 50257}, {19, 50304}};

}  // namespace

TEST_CASE("cross_entropy kernels: loss, lse and gradient vs float64", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    for (const auto& [rows, vocab] : kShapes) {
      CAPTURE(dtype_name(dt), rows, vocab);
      const Problem pb = make_problem(rows, vocab, dt, static_cast<uint64_t>(rows * 31 + vocab));
      const at::Tensor x = pb.logits.cuda();
      const at::Tensor t = pb.targets.cuda();
      const RowRef ref = reference_rows(pb.logits, pb.targets);

      const ForwardOut f = run_forward(x, t, rows, vocab);
      INFO("worst forward error / tolerance " << kForwardAbsTol);
      REQUIRE(worst_rows(f.lse, ref.lse, kForwardAbsTol) <= 1.0);
      REQUIRE(worst_rows(f.loss, ref.loss, kForwardAbsTol) <= 1.0);

      const double g = 1.5 / static_cast<double>(rows);  // not a power of two
      const at::Tensor grad_scale = at::full({1}, static_cast<float>(g), on_cuda(at::kFloat));
      at::Tensor dx = at::full({rows, vocab}, std::numeric_limits<float>::quiet_NaN(), on_cuda(dt));  // poison
      run_backward(x, t, f.lse, grad_scale, rows, vocab, dx.data_ptr());
      const GradRef want = reference_grad(pb.logits, pb.targets, ref, static_cast<double>(static_cast<float>(g)));
      const double err = worst_grad(dx, want, g, dt == at::kBFloat16);
      CAPTURE(err);
      REQUIRE(err <= 1.0);
      if (reporting()) {
        std::printf("cross_entropy %s %ldx%ld: grad error / tolerance %.3f\n", dtype_name(dt).c_str(),
                    static_cast<long>(rows), static_cast<long>(vocab), err);
      }
    }
  }
}

TEST_CASE("cross_entropy kernels: in-place backward equals out-of-place bit for bit", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    for (int64_t vocab : {int64_t{65}, int64_t{50257}}) {
      CAPTURE(dtype_name(dt), vocab);
      const int64_t rows = 23;
      const Problem pb = make_problem(rows, vocab, dt, 77);
      const at::Tensor x = pb.logits.cuda();
      const at::Tensor t = pb.targets.cuda();
      const ForwardOut f = run_forward(x, t, rows, vocab);
      const at::Tensor grad_scale = at::full({1}, 0.37f, on_cuda(at::kFloat));
      at::Tensor out_of_place = at::empty_like(x);
      run_backward(x, t, f.lse, grad_scale, rows, vocab, out_of_place.data_ptr());
      at::Tensor in_place = x.clone();
      run_backward(in_place, t, f.lse, grad_scale, rows, vocab, in_place.data_ptr());
      REQUIRE(!at::equal(in_place.cpu(), pb.logits));  // it was overwritten
      REQUIRE(at::equal(in_place.cpu(), out_of_place.cpu()));
    }
  }
}

TEST_CASE("cross_entropy kernels: unaligned bases (scalar head, scalar-only backward)", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    for (int64_t vocab : {int64_t{65}, int64_t{3000}, int64_t{50304}}) {
      CAPTURE(dtype_name(dt), vocab);
      const int64_t rows = 21;
      const Problem pb = make_problem(rows, vocab, dt, 99);
      const RowRef ref = reference_rows(pb.logits, pb.targets);
      const at::Tensor t = pb.targets.cuda();
      // Logits one element past a 256-byte aligned allocation: no row starts on 16 bytes.
      at::Tensor buf = at::empty({rows * vocab + 8}, on_cuda(dt));
      at::Tensor x = buf.narrow(0, 1, rows * vocab).view({rows, vocab});
      x.copy_(pb.logits);
      REQUIRE(reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 != 0);
      const ForwardOut f = run_forward(x, t, rows, vocab);
      REQUIRE(worst_rows(f.lse, ref.lse, kForwardAbsTol) <= 1.0);
      REQUIRE(worst_rows(f.loss, ref.loss, kForwardAbsTol) <= 1.0);

      const float g = 0.25f;
      const at::Tensor grad_scale = at::full({1}, g, on_cuda(at::kFloat));
      const GradRef want = reference_grad(pb.logits, pb.targets, ref, g);
      // dlogits aligned, logits not: different offsets within 16 bytes -> scalar accesses.
      at::Tensor dx_aligned = at::full({rows, vocab}, std::numeric_limits<float>::quiet_NaN(), on_cuda(dt));
      run_backward(x, t, f.lse, grad_scale, rows, vocab, dx_aligned.data_ptr());
      REQUIRE(worst_grad(dx_aligned, want, g, dt == at::kBFloat16) <= 1.0);
      // Both one element off: same offset -> vectorised body after a scalar head.
      at::Tensor out_buf = at::full({rows * vocab + 8}, std::numeric_limits<float>::quiet_NaN(), on_cuda(dt));
      at::Tensor dx_shifted = out_buf.narrow(0, 1, rows * vocab).view({rows, vocab});
      run_backward(x, t, f.lse, grad_scale, rows, vocab, dx_shifted.data_ptr());
      REQUIRE(at::equal(dx_shifted.cpu(), dx_aligned.cpu()));
      // Nothing outside the rows was written.
      REQUIRE(std::isnan(out_buf[0].item<float>()));
      REQUIRE(std::isnan(out_buf[rows * vocab + 1].item<float>()));
    }
  }
}

TEST_CASE("cross_entropy kernels: an out-of-range target gives a NaN row, others unaffected", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    for (int64_t vocab : {int64_t{1}, int64_t{65}, int64_t{50304}}) {
      CAPTURE(dtype_name(dt), vocab);
      const int64_t rows = 12;
      Problem pb = make_problem(rows, vocab, dt, 5);
      pb.targets[3] = vocab;
      pb.targets[7] = -1;
      const at::Tensor x = pb.logits.cuda();
      const at::Tensor t = pb.targets.cuda();
      const RowRef ref = reference_rows(pb.logits, pb.targets);
      const ForwardOut f = run_forward(x, t, rows, vocab);
      const at::Tensor loss = f.loss.cpu();
      REQUIRE(std::isnan(loss[3].item<float>()));
      REQUIRE(std::isnan(loss[7].item<float>()));
      REQUIRE(at::isfinite(f.lse).all().item<bool>());  // the log-sum-exp does not depend on the target
      REQUIRE(worst_rows(f.loss, ref.loss, kForwardAbsTol) <= 1.0);  // NaN exactly where expected

      const at::Tensor grad_scale = at::full({1}, 0.5f, on_cuda(at::kFloat));
      at::Tensor dx = at::zeros({rows, vocab}, on_cuda(dt));
      run_backward(x, t, f.lse, grad_scale, rows, vocab, dx.data_ptr());
      const at::Tensor dxc = dx.cpu().to(at::kFloat);
      REQUIRE(at::isnan(dxc[3]).all().item<bool>());
      REQUIRE(at::isnan(dxc[7]).all().item<bool>());
      REQUIRE(worst_grad(dx, reference_grad(pb.logits, pb.targets, ref, 0.5), 0.5, dt == at::kBFloat16) <= 1.0);
    }
  }
}

TEST_CASE("cross_entropy kernels: the gradient scale is read from device memory at run time", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  // The scale is rewritten on the device (fill_) between two launches on one stream: the second
  // gradient must follow the new value.
  const Problem pb = make_problem(8, 65, at::kFloat, 3);
  const at::Tensor x = pb.logits.cuda();
  const at::Tensor t = pb.targets.cuda();
  const ForwardOut f = run_forward(x, t, 8, 65);
  at::Tensor grad_scale = at::empty({1}, on_cuda(at::kFloat));
  at::Tensor d1 = at::empty_like(x), d2 = at::empty_like(x);
  grad_scale.fill_(1.0f);
  run_backward(x, t, f.lse, grad_scale, 8, 65, d1.data_ptr());
  grad_scale.fill_(-3.0f);
  run_backward(x, t, f.lse, grad_scale, 8, 65, d2.data_ptr());
  // d1 = (p - onehot) * 1 exactly, so d1 * -3 rounds like the kernel's (p - onehot) * -3: equal bits.
  REQUIRE(at::equal((d1 * -3.0f).cpu(), d2.cpu()));
}

TEST_CASE("cross_entropy kernels: GPT-size logits [16384, 50304] bf16 (timing with FP8T_TEST_REPORT)", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  const int64_t rows = 16384, vocab = 50304;
  if (skip_large(rows * vocab)) SKIP("too large under compute-sanitizer (FP8T_TEST_SMALL)");
  at::manual_seed(17);
  const at::Tensor x = (at::randn({rows, vocab}, on_cuda(at::kFloat)) * 2.0).to(at::kBFloat16);
  const at::Tensor t = at::randint(0, vocab, {rows}, on_cuda(at::kLong));
  const ForwardOut f = run_forward(x, t, rows, vocab);
  // Rows spread over the grid against the float64 reference (the full check is the first test).
  const at::Tensor sample = at::tensor({int64_t{0}, int64_t{1}, int64_t{4097}, int64_t{9999}, rows - 1}, at::kLong);
  const at::Tensor xs = x.index_select(0, sample.cuda()).cpu();
  const at::Tensor ts = t.index_select(0, sample.cuda()).cpu();
  const RowRef ref = reference_rows(xs, ts);
  REQUIRE(worst_rows(f.lse.index_select(0, sample.cuda()), ref.lse, kForwardAbsTol) <= 1.0);
  REQUIRE(worst_rows(f.loss.index_select(0, sample.cuda()), ref.loss, kForwardAbsTol) <= 1.0);
  const float g = 1.0f / rows;
  const at::Tensor grad_scale = at::full({1}, g, on_cuda(at::kFloat));
  at::Tensor dx = at::empty_like(x);
  run_backward(x, t, f.lse, grad_scale, rows, vocab, dx.data_ptr());
  REQUIRE(worst_grad(dx.index_select(0, sample.cuda()), reference_grad(xs, ts, ref, g), g, true) <= 1.0);

  if (!reporting()) return;  // the checks above always ran; the timing below only with FP8T_TEST_REPORT
  cudaEvent_t e0, e1, e2;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventCreate(&e2);
  const cudaStream_t s = current_stream();
  constexpr int kIters = 10;
  cudaEventRecord(e0, s);
  for (int i = 0; i < kIters; ++i) {
    fp8t_cross_entropy_forward(x.data_ptr(), FP8T_DTYPE_BF16, t.data_ptr<int64_t>(), rows, vocab,
                               f.loss.data_ptr<float>(), f.lse.data_ptr<float>(), s);
  }
  cudaEventRecord(e1, s);
  for (int i = 0; i < kIters; ++i) {
    fp8t_cross_entropy_backward(x.data_ptr(), FP8T_DTYPE_BF16, t.data_ptr<int64_t>(), f.lse.data_ptr<float>(),
                                grad_scale.data_ptr<float>(), rows, vocab, dx.data_ptr(), s);
  }
  cudaEventRecord(e2, s);
  REQUIRE(cudaEventSynchronize(e2) == cudaSuccess);
  float fwd_ms = 0.0f, bwd_ms = 0.0f;
  cudaEventElapsedTime(&fwd_ms, e0, e1);
  cudaEventElapsedTime(&bwd_ms, e1, e2);
  fwd_ms /= kIters;
  bwd_ms /= kIters;
  const double bytes = static_cast<double>(rows * vocab) * 2.0;
  std::printf("cross_entropy bf16 %ldx%ld: forward %.3f ms (%.0f GB/s), backward %.3f ms (%.0f GB/s read+write)\n",
              static_cast<long>(rows), static_cast<long>(vocab), fwd_ms, bytes / fwd_ms / 1e6, bwd_ms,
              2.0 * bytes / bwd_ms / 1e6);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaEventDestroy(e2);
}

namespace {

// Bitwise equality of two tensors of one dtype (no tolerance).
bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  return at::equal(a.cpu().contiguous().view(at::kByte), b.cpu().contiguous().view(at::kByte));
}

}  // namespace

TEST_CASE("scale_unless_one: ATen's mul_ by the factor, bit for bit; nothing touched when the factor is 1",
          "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    // 0, a scalar-only tail, a vector body with a tail, an unaligned base (scalar path), a large one.
    for (int64_t n : {int64_t{0}, int64_t{5}, int64_t{1003}, int64_t{3000001}}) {
      for (bool unaligned : {false, true}) {
        CAPTURE(dtype_name(dt), n, unaligned);
        at::manual_seed(n + 11);
        at::Tensor buf = (at::randn({n + 8}, on_cuda(at::kFloat)) * 1e3).to(dt);
        at::Tensor x = buf.narrow(0, unaligned ? 1 : 0, n);
        const at::Tensor before = buf.clone();
        at::Tensor factor = at::full({1}, 1.0f, on_cuda(at::kFloat));
        REQUIRE(fp8t_scale_unless_one(x.data_ptr(), dtype_code(dt), n, factor.data_ptr<float>(), current_stream()) ==
                cudaSuccess);
        REQUIRE(same_bits(buf, before));
        // The factor is read on the device at run time: rewritten there before the second launch.
        factor.fill_(-0.37f);
        const at::Tensor want = x.clone().mul_(factor.reshape({}));
        REQUIRE(fp8t_scale_unless_one(x.data_ptr(), dtype_code(dt), n, factor.data_ptr<float>(), current_stream()) ==
                cudaSuccess);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        REQUIRE(same_bits(x, want));
        if (n > 0) REQUIRE(!same_bits(x, before.narrow(0, unaligned ? 1 : 0, n)));
        // Nothing outside x was written.
        REQUIRE(same_bits(buf.narrow(0, n + (unaligned ? 1 : 0), 8 - (unaligned ? 1 : 0)),
                          before.narrow(0, n + (unaligned ? 1 : 0), 8 - (unaligned ? 1 : 0))));
      }
    }
  }
  const cudaStream_t s = current_stream();
  float* fp = nullptr;
  REQUIRE(fp8t_scale_unless_one(nullptr, FP8T_DTYPE_F32, 4, fp, s) == cudaErrorInvalidValue);
  REQUIRE(fp8t_scale_unless_one(nullptr, FP8T_DTYPE_F32, 0, fp, s) == cudaSuccess);
  REQUIRE(fp8t_scale_unless_one(nullptr, 7, 0, fp, s) == cudaErrorInvalidValue);
}

TEST_CASE("cross_entropy kernels: preconditions", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  const cudaStream_t s = current_stream();
  const at::Tensor x = at::zeros({4, 16}, on_cuda(at::kFloat));
  const at::Tensor t = at::zeros({4}, on_cuda(at::kLong));
  at::Tensor loss = at::empty({4}, on_cuda(at::kFloat)), lse = at::empty({4}, on_cuda(at::kFloat));
  float* lp = loss.data_ptr<float>();
  float* ep = lse.data_ptr<float>();
  const int64_t* tp = t.data_ptr<int64_t>();
  REQUIRE(fp8t_cross_entropy_forward(x.data_ptr(), 7, tp, 4, 16, lp, ep, s) == cudaErrorInvalidValue);
  REQUIRE(fp8t_cross_entropy_forward(x.data_ptr(), FP8T_DTYPE_F32, tp, 4, 0, lp, ep, s) == cudaErrorInvalidValue);
  REQUIRE(fp8t_cross_entropy_forward(x.data_ptr(), FP8T_DTYPE_F32, tp, -1, 16, lp, ep, s) == cudaErrorInvalidValue);
  REQUIRE(fp8t_cross_entropy_forward(x.data_ptr(), FP8T_DTYPE_F32, nullptr, 4, 16, lp, ep, s) == cudaErrorInvalidValue);
  REQUIRE(fp8t_cross_entropy_forward(x.data_ptr(), FP8T_DTYPE_F32, tp, 4, 16, lp, nullptr, s) == cudaErrorInvalidValue);
  const void* odd = static_cast<const char*>(x.data_ptr()) + 2;  // not float-aligned
  REQUIRE(fp8t_cross_entropy_forward(odd, FP8T_DTYPE_F32, tp, 3, 16, lp, ep, s) == cudaErrorInvalidValue);
  REQUIRE(fp8t_cross_entropy_forward(nullptr, FP8T_DTYPE_F32, nullptr, 0, 16, nullptr, nullptr, s) == cudaSuccess);
  REQUIRE(fp8t_cross_entropy_backward(x.data_ptr(), FP8T_DTYPE_F32, tp, ep, nullptr, 4, 16, x.data_ptr(), s) ==
          cudaErrorInvalidValue);
  void* odd_out = static_cast<char*>(loss.data_ptr()) + 1;  // not bf16-aligned
  REQUIRE(fp8t_cross_entropy_backward(x.data_ptr(), FP8T_DTYPE_BF16, tp, ep, lp, 4, 16, odd_out, s) ==
          cudaErrorInvalidValue);
  REQUIRE(fp8t_cross_entropy_backward(nullptr, FP8T_DTYPE_F32, nullptr, nullptr, nullptr, 0, 16, nullptr, s) ==
          cudaSuccess);
}

#endif  // FP8T_WITH_CUDA
