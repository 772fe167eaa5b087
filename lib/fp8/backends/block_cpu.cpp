// The CPU emulation of the block casts (block_quantize.h): the same amaxes (amax_combine), scales
// (block_math.h) and codes (format.h's encoder) as kernels/block_quantize.cu, bit for bit.
#include <ATen/Parallel.h>  // at::parallel_for

#include <algorithm>  // std::min
#include <cmath>      // std::fabs

#include "lib/numerics/block_math.h"          // block_scale_from_amax, layouts
#include "lib/fp8/backends/block_quantize.h"  // BlockQuantized, make_block_scales
#include "lib/numerics/format.h"              // encode_e4m3, kE4M3Max
#include "lib/numerics/scaling_math.h"        // amax_combine
#include "lib/util/error.h"                   // FP8T_CHECK

namespace fp8t {
namespace fp8 {

namespace {

// A row-major float32 matrix being cast, and what every block scale of it depends on.
struct Source {
  const float* x;
  int64_t rows, cols;
  bool power_of_2;
  float value_for_inf;  // block_value_for_inf of the input dtype
};

float block_scale(float amax, const Source& s) {
  return block_scale_from_amax(amax, kE4M3Max, s.power_of_2, s.value_for_inf);
}

// Codes of one 1x128 block (row r, cols [c0, c1)) and its scale_inv.
void cast_row_block(const Source& s, int64_t r, int64_t c0, int64_t c1, uint8_t* codes, float* sinv) {
  const float* row = s.x + r * s.cols;
  float amax = 0.0f;
  for (int64_t c = c0; c < c1; ++c) amax = amax_combine(amax, std::fabs(row[c]));
  const float scale = block_scale(amax, s);
  for (int64_t c = c0; c < c1; ++c) codes[r * s.cols + c] = encode_e4m3(row[c] * scale);
  sinv[vec128_scale_index(r, c0 / kBlockLen, s.rows)] = block_scale_inv(scale);
}

// 1x128 along the columns of s: codes [rows, cols], scales into a zeroed grid buffer.
void cast_1x128(const Source& s, uint8_t* codes, float* sinv) {
  at::parallel_for(0, s.rows, 64, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      for (int64_t c0 = 0; c0 < s.cols; c0 += kBlockLen) {
        cast_row_block(s, r, c0, std::min(c0 + kBlockLen, s.cols), codes, sinv);
      }
    }
  });
}

// One 128x128 tile (rb, cb): its codes, and its scale_inv.
void cast_tile(const Source& s, int64_t rb, int64_t cb, uint8_t* codes, float* sinv) {
  const int64_t r0 = rb * kBlockLen, r1 = std::min(r0 + kBlockLen, s.rows);
  const int64_t c0 = cb * kBlockLen, c1 = std::min(c0 + kBlockLen, s.cols);
  float amax = 0.0f;
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t c = c0; c < c1; ++c) amax = amax_combine(amax, std::fabs(s.x[r * s.cols + c]));
  }
  const float scale = block_scale(amax, s);
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t c = c0; c < c1; ++c) codes[r * s.cols + c] = encode_e4m3(s.x[r * s.cols + c] * scale);
  }
  sinv[blk128_scale_index(rb, cb, s.cols)] = block_scale_inv(scale);
}

void cast_128x128(const Source& s, uint8_t* codes, float* sinv) {
  const int64_t n_rb = ceil_div(s.rows, kBlockLen), n_cb = ceil_div(s.cols, kBlockLen);
  at::parallel_for(0, n_rb * n_cb, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) cast_tile(s, t / n_cb, t % n_cb, codes, sinv);
  });
}

// Codes [rows, cols] and the scale grid of a cast of the float32 matrix xf.
BlockCodes cast_matrix(const at::Tensor& xf, int block_rows, bool power_of_2, float value_for_inf) {
  const int64_t rows = xf.size(0), cols = xf.size(1);
  BlockCodes out;
  out.codes = at::empty({rows, cols}, at::kByte);
  out.scale_inv = make_block_scales(rows, cols, block_rows, at::kCPU);
  const Source s{xf.data_ptr<float>(), rows, cols, power_of_2, value_for_inf};
  float* sinv = out.scale_inv.data_ptr<float>();
  if (block_rows == 1) {
    cast_1x128(s, out.codes.data_ptr<uint8_t>(), sinv);
  } else {
    cast_128x128(s, out.codes.data_ptr<uint8_t>(), sinv);
  }
  return out;
}

// The columnwise copy of a 128x128 cast: transposed codes, transposed block grid.
BlockCodes transpose_128x128(const BlockCodes& q) {
  const int64_t rows = q.codes.size(0), cols = q.codes.size(1);
  BlockCodes t;
  t.codes = q.codes.t().contiguous();
  t.scale_inv = make_block_scales(cols, rows, kBlockLen, at::kCPU);
  t.scale_inv.copy_(q.scale_inv.t());
  return t;
}

}  // namespace

BlockQuantized block_quantize_cpu(const at::Tensor& x, int block_rows, bool rowwise, bool columnwise,
                                  bool power_of_2) {
  FP8T_CHECK(x.dim() == 2, "block quantize expects a 2-D tensor, got ", x.sizes());
  FP8T_CHECK(block_rows == 1 || block_rows == kBlockLen, "block quantize: block_rows must be 1 or 128, got ",
             block_rows);
  const float value_for_inf = block_value_for_inf(x.scalar_type() == at::kBFloat16);
  const at::Tensor xf = x.to(at::kFloat).cpu().contiguous();
  BlockQuantized q;
  if (block_rows == 1) {
    if (rowwise) q.rowwise = cast_matrix(xf, 1, power_of_2, value_for_inf);
    if (columnwise) q.columnwise = cast_matrix(xf.t().contiguous(), 1, power_of_2, value_for_inf);
    return q;
  }
  const BlockCodes full = cast_matrix(xf, kBlockLen, power_of_2, value_for_inf);
  if (columnwise) q.columnwise = transpose_128x128(full);
  if (rowwise) q.rowwise = full;
  return q;
}

}  // namespace fp8
}  // namespace fp8t
