// ProcessGroupNCCL construction (CUDA builds only; the wheel's LibTorch is built with NCCL and
// the nccl.h it needs comes with the wheel's nvidia-nccl package).
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL 1
#endif
#include <c10/cuda/CUDAFunctions.h>                       // c10::cuda::set_device
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>  // c10d::ProcessGroupNCCL

#include "lib/dist/backends.h"  // make_nccl_backend
#include "lib/util/error.h"     // FP8T_INPUT_CHECK

namespace fp8t::dist::detail {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                    int world_size, int local_rank,
                                                    std::chrono::milliseconds timeout) {
  const int visible = static_cast<int>(c10::cuda::device_count());
  FP8T_INPUT_CHECK(local_rank < visible, "LOCAL_RANK=", local_rank, " but only ", visible,
                   " CUDA device(s) are visible: start at most one process per GPU");
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(local_rank));
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options);
}

}  // namespace fp8t::dist::detail
