// The dtype x format dispatch of every launcher (TE's TYPE_SWITCH macros, as templates): turns the
// C API's runtime codes (FP8T_DTYPE_*, FP8T_FORMAT_*, kernels/include/fp8t_kernels.h) into the
// compile-time arguments of a kernel template. The callback receives std::integral_constant tags:
//
//   dispatch_dtype_format(x_dtype, fp8_format, [&](auto dtype, auto format) {
//     cast_kernel<decltype(dtype)::value, decltype(format)::value><<<grid, threads, 0, stream>>>(...);
//   });
//
// Launchers validate the codes first (FP8T_KERNEL_REQUIRE); here an unknown code falls to the
// second alternative, so a launch without FP8 output may pass any format and gets E4M3.
#pragma once

#include <type_traits>  // std::integral_constant, std::true_type

#include "fp8t_kernels.h"  // FP8T_DTYPE_*, FP8T_FORMAT_*

namespace fp8t {
namespace kern {

template <int kValue>
using IntTag = std::integral_constant<int, kValue>;

// f(IntTag<kMatch>{}) when code == kMatch, else f(IntTag<kOther>{}).
template <int kMatch, int kOther, typename F>
void dispatch_two(int code, F&& f) {
  if (code == kMatch) {
    f(IntTag<kMatch>{});
  } else {
    f(IntTag<kOther>{});
  }
}

// fp32 (FP8T_DTYPE_F32) or bf16 (anything else).
template <typename F>
void dispatch_dtype(int dtype, F&& f) {
  dispatch_two<FP8T_DTYPE_F32, FP8T_DTYPE_BF16>(dtype, f);
}

// E5M2 (FP8T_FORMAT_E5M2) or E4M3 (anything else).
template <typename F>
void dispatch_format(int format, F&& f) {
  dispatch_two<FP8T_FORMAT_E5M2, FP8T_FORMAT_E4M3>(format, f);
}

template <typename F>
void dispatch_dtype_format(int dtype, int format, F&& f) {
  dispatch_dtype(dtype, [&](auto d) { dispatch_format(format, [&](auto fmt) { f(d, fmt); }); });
}

// A run-time flag as std::true_type / std::false_type (a kernel's optional fused output).
template <typename F>
void dispatch_bool(bool flag, F&& f) {
  if (flag) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

}  // namespace kern
}  // namespace fp8t
