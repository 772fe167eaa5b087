// Exact CPU emulation of the FP8 recipe: casts use the bit-exact codec of format.h; GEMMs
// decode the codes, multiply in FP32 and apply scale_inv_a * scale_inv_b to the FP32 sum
// (the same factorisation cuBLASLt uses: D = scale_A * scale_B * (A . B)).
#pragma once

#include "lib/fp8/backends/backend.h"  // Backend

namespace fp8t {
namespace fp8 {

Backend& cpu_backend();

// Decode FP8 codes (uint8, any shape) to float32 values (no scale applied).
at::Tensor decode_codes(const at::Tensor& codes, Format format);

}  // namespace fp8
}  // namespace fp8t
