// FP8T_HOST_DEVICE: how a function of lib/numerics/ is declared so that the same text compiles
// for the host (inline) and, under nvcc, for both sides (forced inline: a kernel that calls it
// holds the instructions itself, with no call and no symbol of its own).
#pragma once

#if defined(__CUDACC__)
#define FP8T_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FP8T_HOST_DEVICE inline
#endif
