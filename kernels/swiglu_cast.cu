// SwiGLU fused into the FP8 casts around it (the MLP of a LLaMA block, between c_fc and c_proj):
//
//   forward:  h [rows, 2F] = [gate | up]  ->  y = silu(gate) * up  [rows, F], cast to FP8 with the
//             consumer's input scale: rowwise [rows, F] and columnwise [F, rows];
//   backward: dy [rows, F] and h  ->  dh = [dgate | dup]  [rows, 2F], cast to FP8 with the
//             producer's gradient scale: rowwise [rows, 2F] and columnwise [2F, rows], plus
//             dbias [2F] = column sums of dh in FP32.
//
// Neither y nor dh is written in high precision. The values are lib/numerics/swiglu_math.h's, rounded
// to the input dtype at the points where the unfused LibTorch composition rounds, so the codes
// are those of casting the unfused result computed on the CPU.
//
// Two kernels, each reading every input element once (the forward gate and up, the backward dy,
// gate and up) and writing both gradient halves from the same registers:
// - bf16 without dbias (the LLaMA MLP): the 128x64 tiles of kernels/transpose_tile.cuh (grid-stride,
//   the forward's next tile loaded while the current one is evaluated, column words in shared
//   memory, 16-byte transposed stores, one amax atomic per block), with silu(gate) read from the
//   table of kernels/silu_table.cuh that each block builds first;
// - with dbias, or fp32 inputs (whose tiles would need twice the registers): the 64x64 tiles of
//   kernels/cast_tile.cuh. Its dbias partials follow cast_transpose's summation order exactly, so
//   dbias equals fp8t_cast_transpose_dbias of the materialised gradient bit for bit.
#include <type_traits>  // std::conditional_t

#include "activation.cuh"              // DtypeRound
#include "cast_tile.cuh"               // tile::*, load_chunk, store_transposed, reduce_dbias
#include "transpose_tile.cuh"          // ttile::*: the tiled kernels' loads, encoding, stores, grid
#include "dispatch.cuh"                // dispatch_dtype_format, dispatch_bool
#include "fp8_device.cuh"              // round_to_dtype, to_fp8x2, abs_bits, block_amax_commit
#include "fp8t_kernels.h"              // the C API
#include "launch.cuh"                  // allow_dynamic_smem
#include "lib/numerics/swiglu_math.h"  // swiglu, swiglu_backward, swiglu_given, swiglu_backward_given
#include "precondition.cuh"            // FP8T_LAUNCHER, FP8T_KERNEL_REQUIRE
#include "silu_table.cuh"              // GateSilu, build_gate_silu, silu_table_bytes

// ---- kernels --------------------------------------------------------------------------------

namespace {

using namespace fp8t::kern;
using namespace fp8t::kern::tile;

// Everything a launch needs besides its template choices.
struct SwigluArgs {
  const void* dy;  // backward only: [rows, cols]
  const void* h;   // [rows, 2 * cols] = [gate | up]
  int64_t rows, cols;
  const float* scale;
  uint8_t* out_row;  // forward [rows, cols], backward [rows, 2 * cols]; may be null
  uint8_t* out_col;  // forward [cols, rows], backward [2 * cols, rows]; may be null
  float* amax;
  float* scale_inv_out;
  float* partial;  // dbias partial sums [n_tiles(rows), 2 * cols] (kDbias only)
  bool vec;
  // The tiled backward only (fp8t_dswiglu_cast_transpose_value): the forward value y's columnwise
  // E4M3 codes [cols, rows], cast with *value_scale, no amax. Null: not written.
  const float* value_scale = nullptr;
  uint8_t* value_col = nullptr;
};

// The values the cast sees at (row, col..col+7): y (kOut = 1) or [dgate, dup] (kOut = 2).
template <int kDtype, bool kBackward, int kOut>
__device__ __forceinline__ void swiglu_chunk(const SwigluArgs& a, int64_t row, int64_t col, bool vec,
                                             float (&v)[kOut][kChunk]) {
  float gate[kChunk], up[kChunk];
  load_chunk<kDtype>(a.h, 2 * a.cols, a.rows, a.cols, row, col, vec, gate);
  load_chunk<kDtype>(static_cast<const char*>(a.h) + a.cols * elem_bytes<kDtype>(), 2 * a.cols, a.rows, a.cols,
                     row, col, vec, up);
  const DtypeRound<kDtype> round;
  if constexpr (kBackward) {
    float dy[kChunk];
    load_chunk<kDtype>(a.dy, a.cols, a.rows, a.cols, row, col, vec, dy);
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
      const fp8t::fp8::SwigluGrad g = fp8t::fp8::swiglu_backward(dy[j], gate[j], up[j], round);
      v[0][j] = g.gate;
      v[kOut - 1][j] = g.up;
    }
  } else {
#pragma unroll
    for (int j = 0; j < kChunk; ++j) v[0][j] = fp8t::fp8::swiglu(gate[j], up[j], round);
  }
}

template <int kFormat>
__device__ __forceinline__ void quantize_chunk(const float (&v)[kChunk], float scale, uint8_t (&q)[kChunk]) {
#pragma unroll
  for (int j = 0; j < kChunk; j += 2) {
    const uint32_t two = to_fp8x2<kFormat>(v[j] * scale, v[j + 1] * scale);
    q[j] = static_cast<uint8_t>(two & 0xffu);
    q[j + 1] = static_cast<uint8_t>(two >> 8);
  }
}

template <int kDtype, int kFormat, bool kDbias, bool kBackward>
__global__ void __launch_bounds__(kThreads) swiglu_cast_transpose_kernel(const SwigluArgs a) {
  constexpr int kOut = kBackward ? 2 : 1;  // output halves: y, or dgate and dup
  __shared__ uint8_t tiles[kOut][kTile][kTileStride];
  __shared__ float col_sums[kDbias ? kOut : 1][kDbias ? kRowsPerPass : 1][kDbias ? kSumStride : 1];

  const float scale = a.scale != nullptr ? *a.scale : 1.0f;  // null: amax only, no codes
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && a.scale != nullptr && a.scale_inv_out != nullptr) {
    *a.scale_inv_out = 1.0f / scale;
  }
  const Geom g = geom(a.rows, a.cols);
  const bool vec = g.full && a.vec;
  const int tc = threadIdx.x % kChunksPerRow;
  const int tr = threadIdx.x / kChunksPerRow;
  const int64_t col = g.c0 + kChunk * tc;

  // |v| maxima as floats: fmaxf drops a NaN, which is abs_bits' rule (a NaN counts as 0), and
  // for non-negative floats the float order is the bits' order, so the committed bits are the
  // same; one instruction per value (the abs is an operand modifier) against abs_bits' three.
  float local_max = 0.0f;
  float sum[kOut][kChunk];
#pragma unroll
  for (int o = 0; o < kOut; ++o) {
#pragma unroll
    for (int j = 0; j < kChunk; ++j) sum[o][j] = 0.0f;
  }

#pragma unroll
  for (int pass = 0; pass < kTile / kRowsPerPass; ++pass) {
    const int r = tr + pass * kRowsPerPass;
    const int64_t row = g.r0 + r;
    float v[kOut][kChunk];
    swiglu_chunk<kDtype, kBackward, kOut>(a, row, col, vec, v);
#pragma unroll
    for (int o = 0; o < kOut; ++o) {
      uint8_t q[kChunk];
      quantize_chunk<kFormat>(v[o], scale, q);
#pragma unroll
      for (int j = 0; j < kChunk; ++j) {
        local_max = fmaxf(local_max, fabsf(v[o][j]));
        tiles[o][r][kChunk * tc + j] = q[j];
        // __fadd_rn: v may be a product, which must not be contracted into this add.
        if constexpr (kDbias) sum[o][j] = __fadd_rn(sum[o][j], v[o][j]);
      }
      // Output half o of row `row` starts at column o * cols of the [rows, kOut * cols] output.
      if (a.out_row != nullptr) store_chunk(q, a.out_row + o * a.cols, kOut * a.cols, a.rows, a.cols, row, col, vec);
    }
  }
  if constexpr (kDbias) {
#pragma unroll
    for (int o = 0; o < kOut; ++o) {
#pragma unroll
      for (int j = 0; j < kChunk; ++j) col_sums[o][tr][kChunk * tc + j] = sum[o][j];
    }
  }
  __syncthreads();

  if (a.out_col != nullptr) {
    // Half o of the columnwise output is the [cols, rows] block starting at row o * cols.
#pragma unroll
    for (int o = 0; o < kOut; ++o) store_transposed(tiles[o], a.out_col + o * a.cols * a.rows, a.rows, a.cols, g, a.vec);
  }
  if constexpr (kDbias) {
    const int o = threadIdx.x / kTile;
    if (o < kOut) {
      write_partial_sums(col_sums[o], a.partial + o * a.cols, kOut * a.cols, a.rows, a.cols, g, threadIdx.x % kTile);
    }
  }
  block_amax_commit(__float_as_int(local_max), a.amax);
}

// ---- the tiled kernels (no dbias; kernels/transpose_tile.cuh) ----------------------------------

// One thread's inputs of one 128x64 tile of the [rows, F] activation space: 4 rows x 8 columns of
// gate, up and (backward) dy, as loaded.
struct NoRows {};
template <int kDtype, bool kBackward>
struct SwigluTile {
  ttile::RawRows<kDtype> gate, up;
  std::conditional_t<kBackward, ttile::RawRows<kDtype>, NoRows> dy;
};

template <int kDtype, bool kBackward>
__device__ __forceinline__ void load_swiglu_tile(const SwigluArgs& a, const ttile::TilePos& p, bool fast,
                                                 SwigluTile<kDtype, kBackward>& in) {
  const int64_t row0 = ttile::thread_row0(p);
  const int64_t col = ttile::thread_col(p);
  const char* up = static_cast<const char*>(a.h) + a.cols * elem_bytes<kDtype>();
  ttile::load_rows<kDtype>(a.h, 2 * a.cols, a.rows, a.cols, row0, col, fast, in.gate);
  ttile::load_rows<kDtype>(up, 2 * a.cols, a.rows, a.cols, row0, col, fast, in.up);
  if constexpr (kBackward) ttile::load_rows<kDtype>(a.dy, a.cols, a.rows, a.cols, row0, col, fast, in.dy);
}

// The values the cast sees in the thread's row rr: y (kOut = 1) or [dgate, dup] (kOut = 2); with
// kValue (backward) also the forward value y of the row, from the same silu(gate), into *y.
template <int kDtype, bool kBackward, int kOut, bool kValue = false>
__device__ __forceinline__ void swiglu_row(const SwigluTile<kDtype, kBackward>& in,
                                           const GateSilu<kDtype, kBackward>& silu, int rr,
                                           float (&v)[kOut][ttile::kChunk], float* y = nullptr) {
  float gate[ttile::kChunk], up[ttile::kChunk];
  ttile::unpack_row<kDtype>(in.gate, rr, gate);
  ttile::unpack_row<kDtype>(in.up, rr, up);
  const DtypeRound<kDtype> round;
  fp8t::fp8::SiluOfGate sg[ttile::kChunk];
  silu(gate, sg);
  if constexpr (kBackward) {
    float dy[ttile::kChunk];
    ttile::unpack_row<kDtype>(in.dy, rr, dy);
#pragma unroll
    for (int j = 0; j < ttile::kChunk; ++j) {
      const fp8t::fp8::SwigluGrad g = fp8t::fp8::swiglu_backward_given(dy[j], gate[j], up[j], sg[j], round);
      v[0][j] = g.gate;
      v[kOut - 1][j] = g.up;
      if constexpr (kValue) y[j] = fp8t::fp8::swiglu_given(sg[j].silu, up[j], round);
    }
  } else {
#pragma unroll
    for (int j = 0; j < ttile::kChunk; ++j) v[0][j] = fp8t::fp8::swiglu_given(sg[j].silu, up[j], round);
  }
}

// Encodes the thread's 4 rows of the tile (each output half) and returns their amax. A row whose
// max is NaN has its codes repaired and its amax taken without the NaNs (ttile::fix_nan_codes).
// kValue (backward): also the rows of the forward value y = silu(gate) * up (the forward kernel's
// bits, from the same silu(gate)) in E4M3 with value_scale into vcodes, repaired alike; no amax.
// encode false (the amax pass, no output): the amax alone, NaNs left out as above (fmaxf drops a
// NaN), codes not written.
template <int kDtype, int kFormat, bool kBackward, int kOut, bool kValue = false>
__device__ __forceinline__ float encode_swiglu_tile(const SwigluTile<kDtype, kBackward>& in,
                                                    const GateSilu<kDtype, kBackward>& silu, float scale,
                                                    uint32_t (&codes)[kOut][ttile::kRowsPerThread][2], bool encode,
                                                    float value_scale = 1.0f,
                                                    uint32_t (*vcodes)[2] = nullptr) {
  float m = 0.0f;
#pragma unroll
  for (int rr = 0; rr < ttile::kRowsPerThread; ++rr) {
    float v[kOut][ttile::kChunk];
    float y[kValue ? ttile::kChunk : 1];
    swiglu_row<kDtype, kBackward, kOut, kValue>(in, silu, rr, v, y);
    if (!encode) {
#pragma unroll
      for (int o = 0; o < kOut; ++o) {
#pragma unroll
        for (int j = 0; j < ttile::kChunk; ++j) m = fmaxf(m, fabsf(v[o][j]));
      }
      continue;
    }
#pragma unroll
    for (int o = 0; o < kOut; ++o) {
      const float row_max = ttile::encode_row<kFormat>(v[o], scale, codes[o][rr]);
      m = fmaxf(m, row_max == row_max ? row_max : ttile::fix_nan_codes(v[o], codes[o][rr]));
    }
    if constexpr (kValue) {
      uint32_t(&vc)[2] = vcodes[rr];
      const float row_max = ttile::encode_row<FP8T_FORMAT_E4M3>(y, value_scale, vc);
      if (row_max != row_max) (void)ttile::fix_nan_codes(y, vc);
    }
  }
  return m;
}

// Blocks per SM the register budget is cut for (__launch_bounds__): two, the most without spills
// for bf16 inputs (nvcc 13, sm_90a: forward 108 registers with the next tile's inputs in flight,
// backward 115 with one tile of three inputs; at three blocks, 80 registers, the forward spills
// 28 bytes and the backward 204).
constexpr int kTiledMinBlocks = 2;

// Grid-stride over 128x64 tiles of [rows, F] (kernels/transpose_tile.cuh): the forward issues
// the next tile's loads before the current one is evaluated; the backward, whose three inputs
// would double an already large register set, loads after the store. Output half o of the
// rowwise codes starts at column o * F of [rows, kOut * F], of the columnwise codes at row o * F
// of [kOut * F, rows]. amax: one atomic per block. null outputs are skipped (scale null: amax only).
template <int kDtype, int kFormat, bool kBackward, bool kValue>
__global__ void __launch_bounds__(ttile::kThreads, kTiledMinBlocks)
    swiglu_cast_tiled_kernel(const SwigluArgs a, int64_t row_tiles, int64_t col_tiles, bool vec) {
  static_assert(kBackward || !kValue, "the value companion is a backward output");
  constexpr int kOut = kBackward ? 2 : 1;
  constexpr bool kPrefetch = !kBackward;
  constexpr int kTileWords = ttile::kCols * ttile::kWordsPerCol;
  __shared__ __align__(16) uint32_t words[2][kOut][kTileWords];
  // Dynamic: silu_table_bytes<kDtype, kBackward>() of table, then (kValue) the value's two
  // buffers of column words (static shared memory would pass 48 KiB with them).
  extern __shared__ __align__(16) unsigned char table_smem[];
  uint32_t* value_words = reinterpret_cast<uint32_t*>(table_smem + silu_table_bytes<kDtype, kBackward>());
  const GateSilu<kDtype, kBackward> silu = build_gate_silu<kDtype, kBackward>(table_smem);
  const float value_scale = kValue ? *a.value_scale : 1.0f;
  const bool encode = a.out_row != nullptr || a.out_col != nullptr || kValue;  // else the amax pass
  const float scale = a.scale != nullptr ? *a.scale : 1.0f;
  if (blockIdx.x == 0 && threadIdx.x == 0 && a.scale != nullptr && a.scale_inv_out != nullptr) {
    *a.scale_inv_out = 1.0f / scale;
  }
  float m = 0.0f;
  int buf = 0;
  SwigluTile<kDtype, kBackward> cur, next;
  ttile::TileWalk w(row_tiles, col_tiles);
  if (w.valid()) {
    const ttile::TilePos p0 = w.pos(a.rows, a.cols);
    load_swiglu_tile(a, p0, vec && p0.full, cur);
  }
  for (; w.valid(); w = w.next()) {
    const ttile::TilePos p = w.pos(a.rows, a.cols);
    const ttile::TileWalk wn = w.next();
    const bool fast = vec && p.full;
    if constexpr (kPrefetch) {
      if (wn.valid()) {
        const ttile::TilePos pn = wn.pos(a.rows, a.cols);
        load_swiglu_tile(a, pn, vec && pn.full, next);
      }
    }
    uint32_t codes[kOut][ttile::kRowsPerThread][2];
    uint32_t vcodes[kValue ? ttile::kRowsPerThread : 1][2];
    m = fmaxf(m, encode_swiglu_tile<kDtype, kFormat, kBackward, kOut, kValue>(cur, silu, scale, codes, encode,
                                                                                value_scale, vcodes));
    if (a.out_row != nullptr) {
      const int64_t row0 = ttile::thread_row0(p);
      const int64_t col = ttile::thread_col(p);
#pragma unroll
      for (int o = 0; o < kOut; ++o) {
#pragma unroll
        for (int rr = 0; rr < ttile::kRowsPerThread; ++rr) {
          ttile::store_row(codes[o][rr], a.out_row + o * a.cols, kOut * a.cols, a.rows, a.cols, row0 + rr, col, fast);
        }
      }
    }
    if (a.out_col != nullptr || kValue) {
      if (a.out_col != nullptr) {
#pragma unroll
        for (int o = 0; o < kOut; ++o) ttile::stage_columns(codes[o], words[buf][o]);
      }
      if constexpr (kValue) ttile::stage_columns(vcodes, value_words + buf * kTileWords);
      __syncthreads();  // the other buffer's readers finished before the previous tile's barrier
      if (a.out_col != nullptr) {
#pragma unroll
        for (int o = 0; o < kOut; ++o) {
          ttile::store_transposed(words[buf][o], a.out_col + o * a.cols * a.rows, a.rows, a.cols, p.r0, p.c0, fast);
        }
      }
      if constexpr (kValue) {
        ttile::store_transposed(value_words + buf * kTileWords, a.value_col, a.rows, a.cols, p.r0, p.c0, fast);
      }
      buf ^= 1;
    }
    if constexpr (kPrefetch) {
      cur = next;
    } else if (wn.valid()) {
      const ttile::TilePos pn = wn.pos(a.rows, a.cols);
      load_swiglu_tile(a, pn, vec && pn.full, cur);
    }
  }
  block_amax_commit(__float_as_int(m), a.amax);
}

// Waves of resident blocks of the tiled kernel: two, not transpose_tile.cuh's four, since every
// block first builds its silu table (8192 evaluations of the formula); two still halve the time a
// block delayed by another stream's kernels adds.
constexpr int64_t kTableWaves = 2;

// The tiled kernel (bf16 inputs). Its vector path also needs 16-byte transposed stores: rows a
// multiple of 16 and the columnwise output 16-byte aligned (a.vec has the 16-byte inputs and the
// 8-byte code rows).
// Its instances: forward, backward, and the backward with the value companion (a.value_col).
void launch_tiled(bool backward, int fp8_format, cudaStream_t stream, const SwigluArgs& a) {
  const bool vec = a.vec && a.rows % 16 == 0 && (a.out_col == nullptr || aligned(a.out_col, 16)) &&
                   (a.value_col == nullptr || aligned(a.value_col, 16));
  const bool value = a.value_col != nullptr;
  dispatch_bool(backward, [&](auto backward_tag) {
    dispatch_bool(value, [&](auto value_tag) {
      constexpr bool kBackward = decltype(backward_tag)::value, kValue = decltype(value_tag)::value;
      if constexpr (kBackward || !kValue) {
        dispatch_format(fp8_format, [&](auto format) {
          constexpr auto kKernel = swiglu_cast_tiled_kernel<FP8T_DTYPE_BF16, decltype(format)::value, kBackward, kValue>;
          constexpr size_t kValueWords = 2 * ttile::kCols * ttile::kWordsPerCol * sizeof(uint32_t);
          constexpr size_t kSmem = silu_table_bytes<FP8T_DTYPE_BF16, kBackward>() + (kValue ? kValueWords : 0);
          (void)allow_dynamic_smem<kKernel>(kSmem);  // a failed opt-in fails the launch: swiglu_impl's cudaGetLastError
          const ttile::TiledGrid g =
              ttile::tiled_grid(a.rows, a.cols, ttile::resident_blocks<kKernel>(kSmem), kTableWaves);
          kKernel<<<static_cast<unsigned>(g.blocks), ttile::kThreads, kSmem, stream>>>(a, g.row_tiles, g.col_tiles,
                                                                                       vec);
        });
      }
    });
  });
}

// The 64x64 kernel (cast_tile.cuh): with dbias (the backward of an MLP with biases), whose
// summation order it shares with cast_transpose's dbias, and for fp32 inputs, whose tiles in the
// tiled kernel would need twice the registers.
void launch_64x64(bool backward, int dtype, bool want_dbias, int fp8_format, cudaStream_t stream,
                  const SwigluArgs& a) {
  dispatch_bool(backward, [&](auto backward_tag) {
    dispatch_bool(want_dbias, [&](auto dbias_tag) {
      // The forward has no dbias: its kDbias = true instance is never launched, so do not build it.
      // bf16 without dbias runs the tiled kernel: not built here either.
      constexpr bool kBackward = decltype(backward_tag)::value, kDbias = decltype(dbias_tag)::value;
      if constexpr (kBackward || !kDbias) {
        dispatch_dtype_format(dtype, fp8_format, [&](auto dt, auto format) {
          if constexpr (decltype(dt)::value == FP8T_DTYPE_F32 || kDbias) {
            swiglu_cast_transpose_kernel<decltype(dt)::value, decltype(format)::value, kDbias, kBackward>
                <<<grid(a.rows, a.cols), kThreads, 0, stream>>>(a);
          }
        });
      }
    });
  });
}

// The checks and the launch behind both launchers; `launcher` names the entry point in a failed
// check. backward: dy is read and the outputs are [rows, 2 * cols].
// value_scale, value_col: the backward's value companion (bf16, no dbias: the tiled kernel).
cudaError_t swiglu_impl(const char* launcher, bool backward, const void* dy, const void* h, int dtype,
                        int64_t rows, int64_t cols, const float* scale, int fp8_format, uint8_t* out_row,
                        uint8_t* out_col, float* amax, float* scale_inv_out, float* dbias, void* workspace,
                        cudaStream_t stream, const float* value_scale = nullptr, uint8_t* value_col = nullptr) {
  FP8T_LAUNCHER(launcher);
  if (value_col != nullptr) {
    FP8T_KERNEL_REQUIRE(backward && dtype == FP8T_DTYPE_BF16 && dbias == nullptr,
                        "the value companion needs the bf16 backward without dbias");
    FP8T_KERNEL_REQUIRE(value_scale != nullptr, "no scale for the value companion");
    FP8T_KERNEL_REQUIRE(aligned(value_col, 8), "the value companion's codes are not 8-byte aligned");
  }
  const bool want_dbias = dbias != nullptr;
  FP8T_KERNEL_REQUIRE(rows >= 0 && cols >= 0, "a dimension is negative");
  FP8T_KERNEL_REQUIRE(scale != nullptr || (out_row == nullptr && out_col == nullptr), "no scale for an FP8 output");
  FP8T_KERNEL_REQUIRE(rows * cols == 0 || h != nullptr, "no SwiGLU input h for a nonempty tensor");
  FP8T_KERNEL_REQUIRE(!backward || rows * cols == 0 || dy != nullptr, "no incoming gradient dy for a nonempty tensor");
  FP8T_KERNEL_REQUIRE(valid_dtype(dtype), "the input dtype is not fp32 or bf16");
  FP8T_KERNEL_REQUIRE(valid_format(fp8_format), "the FP8 format is not E4M3 or E5M2");
  FP8T_KERNEL_REQUIRE(!want_dbias || workspace != nullptr, "dbias needs a workspace");
  FP8T_KERNEL_REQUIRE(!want_dbias || aligned(workspace, 16), "the dbias workspace is not 16-byte aligned");
  FP8T_KERNEL_REQUIRE(n_tiles(rows) <= kMaxRowTiles, "rows need more than 65535 tiles of 64 (the grid's y limit)");
  FP8T_KERNEL_REQUIRE(n_tiles(cols) <= kMaxColTiles, "cols need more than 2^31-1 tiles of 64");
  // Vector accesses need every chunk aligned: 8 elements of gate, up and dy (16 or 32 bytes; the
  // up half starts cols elements into each row) and 8 codes in every output row.
  const bool vec = cols % kChunk == 0 && rows % kChunk == 0 && aligned(h, 16) && (dy == nullptr || aligned(dy, 16)) &&
                   (out_row == nullptr || aligned(out_row, 8)) && (out_col == nullptr || aligned(out_col, 8));
  float* partial = want_dbias ? static_cast<float*>(workspace) : nullptr;
  const SwigluArgs args{dy, h, rows, cols, scale, out_row, out_col, amax, scale_inv_out, partial, vec, value_scale,
                        value_col};
  if (dtype == FP8T_DTYPE_BF16 && !want_dbias) {
    launch_tiled(backward, fp8_format, stream, args);
  } else {
    launch_64x64(backward, dtype, want_dbias, fp8_format, stream, args);
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || !want_dbias) return err;
  return reduce_dbias(partial, rows, 2 * cols, dbias, stream);
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------

extern "C" cudaError_t fp8t_swiglu_cast_transpose(const void* h, int dtype, int64_t rows, int64_t cols,
                                                  const float* scale, int fp8_format, uint8_t* out_rowwise,
                                                  uint8_t* out_columnwise, float* amax, float* scale_inv_out,
                                                  cudaStream_t stream) {
  return swiglu_impl("fp8t_swiglu_cast_transpose", false, nullptr, h, dtype, rows, cols, scale, fp8_format,
                     out_rowwise, out_columnwise, amax, scale_inv_out, nullptr, nullptr, stream);
}

extern "C" size_t fp8t_dswiglu_cast_transpose_workspace_bytes(int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return 16;
  return static_cast<size_t>(n_tiles(rows)) * static_cast<size_t>(2 * cols) * sizeof(float);
}

extern "C" cudaError_t fp8t_dswiglu_cast_transpose(const void* dy, const void* h, int dtype, int64_t rows,
                                                   int64_t cols, const float* scale, int fp8_format,
                                                   uint8_t* out_rowwise, uint8_t* out_columnwise, float* amax,
                                                   float* scale_inv_out, float* dbias, void* workspace,
                                                   cudaStream_t stream) {
  return swiglu_impl("fp8t_dswiglu_cast_transpose", true, dy, h, dtype, rows, cols, scale, fp8_format, out_rowwise,
                     out_columnwise, amax, scale_inv_out, dbias, workspace, stream);
}

extern "C" cudaError_t fp8t_dswiglu_cast_transpose_value(const void* dy, const void* h, int dtype, int64_t rows,
                                                         int64_t cols, const float* scale, int fp8_format,
                                                         uint8_t* out_rowwise, uint8_t* out_columnwise, float* amax,
                                                         float* scale_inv_out, const float* value_scale,
                                                         uint8_t* value_columnwise, cudaStream_t stream) {
  return swiglu_impl("fp8t_dswiglu_cast_transpose_value", true, dy, h, dtype, rows, cols, scale, fp8_format,
                     out_rowwise, out_columnwise, amax, scale_inv_out, nullptr, nullptr, stream, value_scale,
                     value_columnwise);
}
