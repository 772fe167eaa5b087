// CapturedGraph on CUDA: LibTorch's at::cuda::CUDAGraph, captured on a side stream (a graph
// cannot be captured on the legacy default stream) into a private memory pool.
#include "lib/step/step_graph.h"

#include <ATen/cuda/CUDAContext.h>   // at::cuda::getStreamFromPool, getCurrentCUDAStream
#include <ATen/cuda/CUDAGraph.h>     // at::cuda::CUDAGraph
#include <c10/cuda/CUDAFunctions.h>  // c10::cuda::device_synchronize
#include <c10/cuda/CUDAGuard.h>      // c10::cuda::CUDAGuard, CUDAStreamGuard
#include <cuda_runtime_api.h>        // cudaStreamIsCapturing, cudaStreamEndCapture

#include <c10/util/Exception.h>  // c10::Error

#include <exception>  // std::exception

#include "lib/util/error.h"  // FP8T_THROW

namespace fp8t::step {

struct CapturedGraph::Impl {
  at::cuda::CUDAGraph graph;
};

namespace {

// After a body that threw mid-capture: ends the stream's capture (discarding the partial graph)
// so the stream and the allocator are usable again, and clears the capture error.
void abandon_capture(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(stream, &partial);
    if (partial != nullptr) cudaGraphDestroy(partial);
  }
  (void)cudaGetLastError();
}

}  // namespace

CapturedGraph::CapturedGraph() : impl_(std::make_unique<Impl>()) {}
CapturedGraph::~CapturedGraph() = default;

std::unique_ptr<CapturedGraph> CapturedGraph::capture(const std::function<void()>& body, const c10::Device& device) {
  std::unique_ptr<CapturedGraph> out(new CapturedGraph());
  const c10::cuda::CUDAGuard device_guard(device);
  // Everything queued so far (the warm-up steps, the staged inputs) is done before the side
  // stream starts capturing; the replay then runs on the current stream, after it.
  c10::cuda::device_synchronize();
  const at::cuda::CUDAStream side = at::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
  try {
    const c10::cuda::CUDAStreamGuard stream_guard(side);
    out->impl_->graph.capture_begin();
    try {
      body();
    } catch (...) {
      abandon_capture(side.stream());
      throw;
    }
    out->impl_->graph.capture_end();
  } catch (const c10::Error& e) {  // LibTorch's, e.g. an operation that cannot be captured
    abandon_capture(side.stream());
    out.reset();  // the graph's reset() hands its pool back
    FP8T_THROW(ExitCode::kFailure, "capturing the training step failed: ", e.what_without_backtrace());
  } catch (const std::exception& e) {
    abandon_capture(side.stream());
    out.reset();
    FP8T_THROW(ExitCode::kFailure, "capturing the training step failed: ", e.what());
  }
  return out;
}

void CapturedGraph::replay() { impl_->graph.replay(); }

}  // namespace fp8t::step
