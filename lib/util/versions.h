// Version strings for `fp8train --version` and the run summary.
#pragma once
#include <string>  // std::string

namespace fp8t {
std::string fp8train_version();
// "LibTorch 2.11.0 (built against 2.15.0), CUDA 13.0 runtime, GPU: NVIDIA H200 (sm_90)" style.
std::string runtime_versions();
}  // namespace fp8t
