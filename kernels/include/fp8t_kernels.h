// fp8train CUDA kernels: a small C-style API over kernels/*.cu (no LibTorch here).
//
// Conventions: every function launches on `stream`, checks its preconditions and the launch
// status, and returns a cudaError_t (cudaSuccess, cudaErrorInvalidValue for a violated
// precondition, or the launch error). After a violated precondition, fp8t_last_precondition()
// says which one (the host side puts it into its error message). Pointers are device pointers. FP8 data are uint8 codes
// (lib/numerics/format.h). "amax" arguments are single floats that the kernel max-accumulates
// into (NaN elements ignored, inf counted: fp8::amax_combine); "scale" is read on the device
// (no host reads).
#pragma once

#include <cuda_runtime.h>  // cudaStream_t, cudaError_t
#include <stddef.h>        // size_t
#include <stdint.h>        // uint8_t, int64_t

// Element types of high-precision inputs/outputs (`*_dtype` arguments).
#define FP8T_DTYPE_F32 0
#define FP8T_DTYPE_BF16 1
// FP8 formats (`fp8_format` arguments); the values of fp8t::fp8::Format (lib/numerics/format.h).
#define FP8T_FORMAT_E4M3 0
#define FP8T_FORMAT_E5M2 1

#ifdef __cplusplus
extern "C" {
#endif

// ---- errors (kernels/precondition.cu) ------------------------------------------------------
// Which precondition failed in the last fp8t_* call of the calling thread, as
// "<launcher>: <what is wrong> (failed check: <condition>)", e.g. "fp8t_cast_transpose: rows need
// more than 65535 tiles of 64 (failed check: gy <= 65535)"; "" when that call's preconditions
// held (a cudaErrorInvalidValue then came from the CUDA runtime). Valid until the thread's next
// fp8t_* call.
const char* fp8t_last_precondition(void);

// ---- delayed scaling (kernels/delayed_scaling.cu) -----------------------------------------
// One update of all n_slots slots in one launch: scaling_math.h update_slot() per slot.
// history: [history_len, n_slots] row-major; scale, scale_inv, fp8_max: [n_slots].
cudaError_t fp8t_delayed_scaling_update(float* history, float* scale, float* scale_inv,
                                        const float* fp8_max, int n_slots, int history_len,
                                        float two_pow_margin, int use_max, int recompute,
                                        cudaStream_t stream);

// ---- current scaling (kernels/current_scaling.cu) ------------------------------------------
// *scale = scaling_math.h current_scale(*amax, fp8_max, two_pow_margin), *scale_inv = 1 / *scale;
// one thread, so a cast launched after it on the stream reads the new scale (no host read).
// amax_copy (nullable): also receives *amax (a producer's amax recorded as the slot's).
cudaError_t fp8t_current_scale(const float* amax, float fp8_max, float two_pow_margin, float* scale,
                               float* scale_inv, float* amax_copy, cudaStream_t stream);

// ---- amax passes (kernels/amax.cu) -------------------------------------------------------------
// Current scaling's amax pass of one cast and its scale, in ONE launch: *amax = max|value| (SET,
// not max-accumulated; NaN elements ignored, inf counted: fp8::amax_combine) of the value the
// cast with the same `act` quantizes, without writing that value:
//   FP8T_ACT_NONE     x [rows, cols];
//   FP8T_ACT_GELU     gelu(x), x [rows, cols] (the values of fp8t_gelu_cast_transpose);
//   FP8T_ACT_DGELU    the GELU backward of dy = x [rows, cols] at h [rows, cols];
//   FP8T_ACT_SWIGLU   silu(gate) * up [rows, cols] of x = h [rows, 2 * cols] = [gate | up]
//                     (the values of fp8t_swiglu_cast_transpose);
//   FP8T_ACT_DSWIGLU  [dgate | dup] [rows, 2 * cols] of dy = x [rows, cols] at h [rows, 2 * cols]
//                     (those of fp8t_dswiglu_cast_transpose).
// Inputs row-major, contiguous, fp32 or bf16 (x and h of one dtype); 16-byte vector loads when
// every input is 16-byte aligned (SwiGLU: and cols a multiple of 16 bytes of elements), scalar
// loads at any element alignment otherwise. scale and scale_inv (both or neither): the last CTA
// writes *scale = scaling_math.h current_scale(*amax, fp8_max, two_pow_margin) and *scale_inv =
// 1 / *scale, so a cast launched next on the stream reads them. workspace: 2 uint32 on the device
// (accumulator, CTA ticket), zero before the first call; every call leaves them zero again. Calls
// sharing a workspace must not overlap (one stream). rows * cols == 0 gives amax 0 (scale 1).
cudaError_t fp8t_amax_scale(int act, const void* x, const void* h, int dtype, int64_t rows, int64_t cols,
                            float* amax, unsigned int* workspace, float fp8_max, float two_pow_margin,
                            float* scale, float* scale_inv, cudaStream_t stream);

// The SwiGLU amax pass with its value: fp8t_amax_scale of FP8T_ACT_SWIGLU (backward = 0; dy
// unused) or FP8T_ACT_DSWIGLU (backward = 1) that also writes the value whose amax it takes, in the
// input dtype: y [rows, cols], or [dgate | dup] [rows, 2 * cols]; bit for bit the outputs of
// fp8t_swiglu_forward / fp8t_swiglu_backward. Current scaling then casts that tensor with the
// plain cast kernels (memory-bound) instead of evaluating the SwiGLU again in the fused casts.
// out: not an input; 16-byte aligned for vector stores (with the inputs' conditions above), else
// every access is scalar.
cudaError_t fp8t_swiglu_amax_scale_value(int backward, const void* dy, const void* h, int dtype, int64_t rows,
                                         int64_t cols, void* out, float* amax, unsigned int* workspace,
                                         float fp8_max, float two_pow_margin, float* scale, float* scale_inv,
                                         cudaStream_t stream);

// ---- cast (kernels/cast.cu) ------------------------------------------------------------------
// out[i] = fp8(x[i] * *scale) for n elements of x (fp32 or bf16), any shape (flat).
// amax (nullable): max-accumulates max|x[i]| of the UNSCALED input. scale_inv_out (nullable):
// receives 1 / *scale, the snapshot stored with the data. 16-byte vector loads/stores when x and
// out are 16-byte aligned, scalar otherwise and for the tail. n == 0 still writes scale_inv_out.
cudaError_t fp8t_cast(const void* x, int x_dtype, int64_t n, const float* scale, int fp8_format,
                      uint8_t* out, float* amax, float* scale_inv_out, cudaStream_t stream);

// ---- cast + transpose (kernels/cast_transpose.cu) --------------------------------------------
// One read of x[rows, cols] (row-major, fp32 or bf16) writes out_rowwise[rows, cols] and
// out_columnwise[cols, rows] (= the FP8 codes of x transposed); either output may be null.
// amax / scale_inv_out as for fp8t_cast.
cudaError_t fp8t_cast_transpose(const void* x, int x_dtype, int64_t rows, int64_t cols,
                                const float* scale, int fp8_format, uint8_t* out_rowwise,
                                uint8_t* out_columnwise, float* amax, float* scale_inv_out,
                                cudaStream_t stream);

// Bytes of device workspace fp8t_cast_transpose_dbias needs (per-tile column partial sums).
size_t fp8t_cast_transpose_dbias_workspace_bytes(int64_t rows, int64_t cols);

// fp8t_cast_transpose for a gradient, also writing dbias[cols] = sum over rows of x, in FP32
// (per-tile partials, then a second launch that adds them in a fixed order: deterministic).
// workspace: at least fp8t_cast_transpose_dbias_workspace_bytes(rows, cols), 16-byte aligned.
cudaError_t fp8t_cast_transpose_dbias(const void* x, int x_dtype, int64_t rows, int64_t cols,
                                      const float* scale, int fp8_format, uint8_t* out_rowwise,
                                      uint8_t* out_columnwise, float* amax, float* scale_inv_out,
                                      float* dbias, void* workspace, cudaStream_t stream);

// fp8t_cast_transpose of gelu(x) (tanh approximation, FP32 math in LibTorch's operation order,
// rounded to x's dtype before the cast): the codes equal those of casting at::gelu(x, "tanh"),
// without writing gelu(x) in high precision. amax is max|gelu(x)|.
cudaError_t fp8t_gelu_cast_transpose(const void* x, int x_dtype, int64_t rows, int64_t cols,
                                     const float* scale, int fp8_format, uint8_t* out_rowwise,
                                     uint8_t* out_columnwise, float* amax, float* scale_inv_out,
                                     cudaStream_t stream);

// The GELU backward fused into the gradient cast: casts g = dy * gelu'(x) (at::gelu_backward(dy,
// x, "tanh"), rounded to the dtype), dy and x [rows, cols] of one dtype and alignment. dbias
// (nullable) = column sums of g as in fp8t_cast_transpose_dbias, with its workspace.
cudaError_t fp8t_dgelu_cast_transpose(const void* dy, const void* x, int dtype, int64_t rows,
                                      int64_t cols, const float* scale, int fp8_format,
                                      uint8_t* out_rowwise, uint8_t* out_columnwise, float* amax,
                                      float* scale_inv_out, float* dbias, void* workspace,
                                      cudaStream_t stream);

// What fp8t_cast_transpose_act casts (`act` argument).
#define FP8T_ACT_NONE 0   // x
#define FP8T_ACT_GELU 1   // gelu(x), as fp8t_gelu_cast_transpose
#define FP8T_ACT_DGELU 2  // the GELU backward of dy = x at h, as fp8t_dgelu_cast_transpose
#define FP8T_ACT_SWIGLU 3   // silu(gate) * up of h = x (fp8t_amax_scale only; the casts: swiglu_cast.cu)
#define FP8T_ACT_DSWIGLU 4  // the SwiGLU backward of dy = x at h (fp8t_amax_scale only)

// The four functions above as one entry point, for callers that choose at run time: act picks
// what is cast, h is the GELU input (FP8T_ACT_DGELU only, else null), dbias/workspace as for
// fp8t_cast_transpose_dbias (dbias null: none). Launches exactly what the specific function does.
cudaError_t fp8t_cast_transpose_act(int act, const void* x, const void* h, int dtype, int64_t rows,
                                    int64_t cols, const float* scale, int fp8_format,
                                    uint8_t* out_rowwise, uint8_t* out_columnwise, float* amax,
                                    float* scale_inv_out, float* dbias, void* workspace,
                                    cudaStream_t stream);

// out[cols, rows] = in[rows, cols]ᵀ for FP8 codes (the columnwise copy of an FP8 tensor that was
// written rowwise, e.g. by the fused norm).
cudaError_t fp8t_transpose_codes(const uint8_t* in, int64_t rows, int64_t cols, uint8_t* out,
                                 cudaStream_t stream);

// ---- SwiGLU casts (kernels/swiglu_cast.cu) ---------------------------------------------------
// h [rows, 2 * cols] = [gate | up] (row-major, fp32 or bf16). The values are lib/numerics/swiglu_math.h
// swiglu / swiglu_backward, rounded to the dtype where at::silu(gate) * up and its autograd
// round, so the codes equal those of casting the unfused result of the CPU emulation.
//
// Forward: casts y = silu(gate) * up [rows, cols] like fp8t_cast_transpose (out_rowwise [rows,
// cols], out_columnwise [cols, rows], either may be null; both null: amax only, and scale may be
// null too: current scaling's amax pass), without writing y.
cudaError_t fp8t_swiglu_cast_transpose(const void* h, int dtype, int64_t rows, int64_t cols,
                                       const float* scale, int fp8_format, uint8_t* out_rowwise,
                                       uint8_t* out_columnwise, float* amax, float* scale_inv_out,
                                       cudaStream_t stream);

// Bytes of device workspace fp8t_dswiglu_cast_transpose needs for dbias.
size_t fp8t_dswiglu_cast_transpose_workspace_bytes(int64_t rows, int64_t cols);

// Backward: from dy [rows, cols] (h's dtype) and h, casts the gradient of h, dh = [dgate | dup]
// [rows, 2 * cols]: out_rowwise [rows, 2 * cols], out_columnwise [2 * cols, rows] (either may be
// null; both null: amax only, scale nullable), without writing dh. dbias (nullable) [2 * cols] = column sums of dh in FP32, in
// fp8t_cast_transpose_dbias's order (bit-equal to it on the materialised dh), with a workspace of
// fp8t_dswiglu_cast_transpose_workspace_bytes(rows, cols), 16-byte aligned.
cudaError_t fp8t_dswiglu_cast_transpose(const void* dy, const void* h, int dtype, int64_t rows,
                                        int64_t cols, const float* scale, int fp8_format,
                                        uint8_t* out_rowwise, uint8_t* out_columnwise, float* amax,
                                        float* scale_inv_out, float* dbias, void* workspace,
                                        cudaStream_t stream);

// fp8t_dswiglu_cast_transpose (bf16, no dbias) that also writes, from the same read of h, the
// forward value y = silu(gate) * up (fp8t_swiglu_cast_transpose's values) as E4M3 codes cast with
// *value_scale, columnwise: value_columnwise [cols, rows] (non-null, 8-byte aligned). No amax of y
// is taken and no scale_inv written for it: the codes are those a columnwise forward cast with that
// scale writes, for the consumer Linear's wgrad when its forward did not keep them.
cudaError_t fp8t_dswiglu_cast_transpose_value(const void* dy, const void* h, int dtype, int64_t rows,
                                              int64_t cols, const float* scale, int fp8_format,
                                              uint8_t* out_rowwise, uint8_t* out_columnwise, float* amax,
                                              float* scale_inv_out, const float* value_scale,
                                              uint8_t* value_columnwise, cudaStream_t stream);

// ---- normalisation (kernels/norm_forward.cu, norm_backward.cu) -----------------------------
// LayerNorm (rms = 0) or RMSNorm (rms = 1) over the last dim of x[rows, cols] (fp32 or bf16),
// FP32 statistics:
//   LayerNorm: y = (x - mean) * rstd * gamma + beta, rstd = 1 / sqrt(var + eps) (biased var)
//   RMSNorm:   y = x * rstd * gamma,                  rstd = 1 / sqrt(mean(x^2) + eps)
// y has x's dtype. gamma [cols] float32; beta [cols] float32 or null (no bias; ignored for RMS).
// mean [rows] (LayerNorm; may be null for RMS) and rstd [rows] float32.
// FP8 output when scale != null: y_fp8[rows, cols] = fp8(y * *scale) of the STORED y (so it equals
// a cast of y), scale_inv_out (nullable) = 1 / *scale. amax (nullable) max-accumulates max|y| of
// the stored y, with or without an FP8 output (current scaling casts y afterwards with a scale
// from this amax). With an FP8 output, y may be null: then only the FP8 copy is written. With an
// amax alone y may be null too: a pass for the amax only (current scaling's first pass over a
// norm whose y nobody reads; a second norm of the same input then casts with the scale from it).
cudaError_t fp8t_norm_forward(const void* x, int x_dtype, int64_t rows, int64_t cols,
                              const float* gamma, const float* beta, float eps, int rms, void* y,
                              float* mean, float* rstd, const float* scale, int fp8_format,
                              uint8_t* y_fp8, float* amax, float* scale_inv_out,
                              cudaStream_t stream);

// The residual add fused into the norm: r[rows, cols] = x + h (x float32, h fp32 or bf16, the
// FP32 sum of x and float(h): what an unfused x + h of an FP32 x gives), written to r (float32),
// and the norm of r as fp8t_norm_forward computes it (the same reductions, so y, mean, rstd, the
// FP8 copy and amax are bit-equal to fp8t_norm_forward of the stored r), y in y_dtype (fp32 or
// bf16: the FP32 value rounded once).
cudaError_t fp8t_add_norm_forward(const float* x, const void* h, int h_dtype, int64_t rows, int64_t cols,
                                  float* r, const float* gamma, const float* beta, float eps, int rms,
                                  void* y, int y_dtype, float* mean, float* rstd, const float* scale,
                                  int fp8_format, uint8_t* y_fp8, float* amax, float* scale_inv_out,
                                  cudaStream_t stream);

// Bytes of device workspace fp8t_norm_backward needs (per-block dgamma/dbeta partials and their
// per-run sums).
size_t fp8t_norm_backward_workspace_bytes(int64_t rows, int64_t cols);

// Backward of fp8t_norm_forward. x and dx have `dtype`, dy has `dy_dtype` (fp32 or bf16, either
// combination); mean/rstd as saved by the forward
// (mean ignored for RMS). dgamma [cols] and dbeta [cols] (nullable; ignored for RMS) float32,
// accumulated in FP32 per block and then reduced in a fixed order (no atomics: deterministic).
// workspace: at least fp8t_norm_backward_workspace_bytes(rows, cols), 16-byte aligned.
cudaError_t fp8t_norm_backward(const void* dy, int dy_dtype, const void* x, int dtype, int64_t rows,
                               int64_t cols, const float* gamma, const float* mean,
                               const float* rstd, int rms, void* dx, float* dgamma, float* dbeta,
                               void* workspace, cudaStream_t stream);

// Backward of fp8t_add_norm_forward: the gradient of r is the norm's (fp8t_norm_backward of dy at
// r, rounded to FP32) plus dr [rows, cols] float32, the gradient arriving at r from its other use
// (null: none), added in FP32 (what autograd sums unfused); written to dx (float32, the gradient
// of x) and to dh (nullable) in h_dtype (fp32 or bf16, rounded once: the gradient of h). dgamma,
// dbeta and the workspace as fp8t_norm_backward (fp8t_norm_backward_workspace_bytes).
cudaError_t fp8t_add_norm_backward(const void* dy, int dy_dtype, const float* r, const float* dr,
                                   int64_t rows, int64_t cols, const float* gamma, const float* mean,
                                   const float* rstd, int rms, float* dx, void* dh, int h_dtype,
                                   float* dgamma, float* dbeta, void* workspace, cudaStream_t stream);

// ---- rotary position embedding (kernels/rope.cu) --------------------------------------------
// RoPE in the half-split convention of lib/model/rope.h: a head of head_dim D is [x1 | x2] and pair
// i (x1[i], x2[i]) at position t is rotated by the angle whose cosine and sine are cos[t * stride +
// i] and sin[t * stride + i] (float32 tables of D / 2 columns, i < D / 2):
//   FP8T_ROPE_ROTATE       y1 = x1 c - x2 s,  y2 = x2 c + x1 s      (the forward)
//   FP8T_ROPE_ROTATE_BACK  y1 = x1 c + x2 s,  y2 = x2 c - x1 s      (its backward: the transpose)
//   FP8T_ROPE_COPY         y = x                                      (a part carried along: v)
// Each product and sum is one IEEE FP32 operation (no contraction), and y is rounded once to the
// dtype: the bits of LibTorch's FP32 composition (x * cos + rotate_half(x) * sin, and its autograd)
// rounded to bf16. Up to FP8T_ROPE_MAX_PARTS parts per launch, each `heads` heads of [batch, seq]
// tokens: element (b, t, h, d) of a part is at src + b * src_stride[0] + t * src_stride[1] +
// h * src_stride[2] + d (strides in elements; d contiguous), likewise for dst. Preconditions: dtype
// fp32 or bf16 (src and dst of one dtype), D a multiple of 16, every src / dst / table pointer
// 16-byte aligned and every stride a multiple of 16 bytes (tables: 4 floats), seq <= table_rows,
// dst not overlapping any src.
#define FP8T_ROPE_COPY 0
#define FP8T_ROPE_ROTATE 1
#define FP8T_ROPE_ROTATE_BACK 2
#define FP8T_ROPE_MAX_PARTS 4

typedef struct fp8t_rope_part {
  const void* src;
  int64_t src_stride[3];  // batch, position, head
  void* dst;
  int64_t dst_stride[3];
  int heads;
  int op;  // FP8T_ROPE_*
} fp8t_rope_part;

cudaError_t fp8t_rope(const fp8t_rope_part* parts, int n_parts, int dtype, int64_t batch, int64_t seq,
                      int head_dim, const float* cos, const float* sin, int64_t table_stride,
                      int64_t table_rows, cudaStream_t stream);

// ---- SwiGLU in high precision (kernels/swiglu.cu) ------------------------------------------
// The plain model's SwiGLU on h [rows, 2 * cols] = [gate | up] (row-major, contiguous, fp32 or
// bf16), with the values of lib/numerics/swiglu_math.h rounded to the dtype where at::silu(gate) *
// up and its autograd round (those of the CPU computation):
//   forward:  y [rows, cols] = silu(gate) * up;
//   backward: dh [rows, 2 * cols] = [dgate | dup] from dy [rows, cols] (h's dtype).
// 16-byte accesses when cols is a multiple of 8 and every pointer is 16-byte aligned, scalar ones
// otherwise. Outputs must not overlap the inputs.
cudaError_t fp8t_swiglu_forward(const void* h, int dtype, int64_t rows, int64_t cols, void* y,
                                cudaStream_t stream);
cudaError_t fp8t_swiglu_backward(const void* dy, const void* h, int dtype, int64_t rows, int64_t cols,
                                 void* dh, cudaStream_t stream);

// ---- FP8 health statistics (kernels/saturation.cu) -------------------------------------------
// out[0] = fraction of x with |x * scale| >= fp8_max (saturates), out[1] = fraction with x != 0
// whose code is +-0 (flushes to zero), over n elements of x (fp32 or bf16). counters: device
// workspace of two unsigned long long (zeroed by the call). n == 0 gives zeros.
cudaError_t fp8t_saturation_stats(const void* x, int x_dtype, int64_t n, const float* scale,
                                  int fp8_format, float* out, unsigned long long* counters,
                                  cudaStream_t stream);

// ---- cross-entropy (kernels/cross_entropy.cu) ------------------------------------------------
// Softmax cross-entropy over the rows of logits[rows, vocab] (row-major, fp32 or bf16) against
// class indices targets[rows] (int64), for the GPT loss; FP32 math with expf/logf (agrees with
// ATen's log_softmax + nll_loss to about 1e-6 relative). Any vocab >= 1 and any element-aligned
// logits pointer; 16-byte accesses where the row layout allows, scalar ones elsewhere.
//
// Forward, one read of each row: lse[r] = log(sum_v exp(logits[r, v])) and
// loss[r] = lse[r] - logits[r, targets[r]], both float32 [rows]. A target outside [0, vocab) makes
// loss[r] NaN (no device assert; ATen's ignore_index is not supported).
cudaError_t fp8t_cross_entropy_forward(const void* logits, int logits_dtype, const int64_t* targets,
                                       int64_t rows, int64_t vocab, float* loss, float* lse,
                                       cudaStream_t stream);

// Backward: dlogits[r, v] = (exp(logits[r, v] - lse[r]) - (v == targets[r])) * *grad_scale, in
// logits_dtype, from lse as written by the forward. grad_scale is ONE float read on the device
// (e.g. d(mean loss) / rows), never on the host. dlogits may be logits itself (in place: every
// element is read before it is written, by the same thread). A row whose target is outside
// [0, vocab) gets NaN gradients.
cudaError_t fp8t_cross_entropy_backward(const void* logits, int logits_dtype, const int64_t* targets,
                                        const float* lse, const float* grad_scale, int64_t rows,
                                        int64_t vocab, void* dlogits, cudaStream_t stream);

// x[i] *= *factor for the n fp32 or bf16 elements of x, as ATen's mul_ by a 0-d float32 tensor
// computes it (the factor converted to x's dtype, the product in FP32, rounded to x's dtype),
// unless *factor == 1, read on the device: then nothing is read or written past the factor. The LM head's kept gradients times the loss's incoming gradient, usually 1.
cudaError_t fp8t_scale_unless_one(void* x, int dtype, int64_t n, const float* factor, cudaStream_t stream);

#ifdef __cplusplus
}  // extern "C"
#endif
