// The log window: what the next metrics row averages, the steps since the previous row
// (train.log_interval). A checkpoint carries it (meta "log_window"), so that the first row after
// a resume averages the same steps as the uninterrupted run's row at that step, and equals it:
// the same sums, continued in the same order.
//
// Each rank sums its own micro-batch losses on the device; the row's all-reduce adds the ranks'.
// So the checkpoint keeps every rank's sum (one collective when it is written), and a resume on
// the same number of ranks gives each rank its own back. On another number of ranks the window
// starts empty (the ranks' rows of a global batch change), as every window did before the key.
#pragma once

#include <ATen/core/Tensor.h>  // at::Tensor
#include <c10/core/Device.h>   // c10::Device
#include <nlohmann/json.hpp>   // nlohmann::json

#include <cstdint>  // int64_t

namespace fp8t::dist {
class Communicator;
}

namespace fp8t::train {

struct LogWindow {
  at::Tensor loss_sum;         // this rank's micro-batch losses since the previous row (0-d FP32, on the device)
  int64_t micro_batches = 0;   // this rank's micro-batches since the previous row (skipped steps' included)
  int64_t skipped_before = 0;  // the run's count of skipped steps at the previous row

  // An empty window on `device`, after a row whose skipped-step count was `skipped`.
  static LogWindow empty(const c10::Device& device, int64_t skipped);
  // Starts the next window after a row (the skipped-step count at that row).
  void reset(int64_t skipped);
};

// The checkpoint's meta "log_window": {"world_size", "loss_sums" (one per rank, by rank),
// "micro_batches", "skipped_before"}. In a job every rank must call it (one all-reduce); the
// result is complete on every rank. One process: `comm` null, `rank` 0, `world_size` 1.
nlohmann::json log_window_meta(const LogWindow& mine, dist::Communicator* comm, int rank, int world_size);

// This rank's window from a checkpoint's meta "log_window" (`meta`: that object, or null when
// the checkpoint has none); an empty window after `skipped` skipped steps when there is none or
// it was written by another number of ranks.
LogWindow restore_log_window(const nlohmann::json& meta, int rank, int world_size, const c10::Device& device,
                             int64_t skipped);

}  // namespace fp8t::train
