// Precompiled header for the fp8t targets: the heavy LibTorch headers, parsed once.
#pragma once
#include <torch/torch.h>  // at::Tensor, torch::nn, torch::autograd
