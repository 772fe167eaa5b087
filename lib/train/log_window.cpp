#include "lib/train/log_window.h"

#include <ATen/ATen.h>  // at::zeros, at::full

#include <cmath>   // std::isfinite
#include <limits>  // std::numeric_limits
#include <vector>  // std::vector

#include "lib/dist/communicator.h"  // dist::Communicator, dist::ReduceOp

namespace fp8t::train {

LogWindow LogWindow::empty(const c10::Device& device, int64_t skipped) {
  LogWindow w;
  w.loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device));
  w.skipped_before = skipped;
  return w;
}

void LogWindow::reset(int64_t skipped) {
  loss_sum.zero_();
  micro_batches = 0;
  skipped_before = skipped;
}

nlohmann::json log_window_meta(const LogWindow& mine, dist::Communicator* comm, int rank, int world_size) {
  // Every rank's sum in its own slot; a SUM all-reduce adds zeros to the others (exact).
  at::Tensor sums = at::zeros({world_size}, mine.loss_sum.options());
  sums.narrow(0, rank, 1).copy_(mine.loss_sum.reshape({1}));
  if (comm != nullptr) comm->all_reduce(sums, dist::ReduceOp::kSum);
  const at::Tensor host = sums.cpu();
  nlohmann::json values = nlohmann::json::array();
  for (int r = 0; r < world_size; ++r) {
    const double v = host[r].item<float>();  // a float is exact as a double, and as JSON's shortest round trip
    values.push_back(std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr));
  }
  return {{"world_size", world_size}, {"loss_sums", values}, {"micro_batches", mine.micro_batches},
          {"skipped_before", mine.skipped_before}};
}

LogWindow restore_log_window(const nlohmann::json& meta, int rank, int world_size, const c10::Device& device,
                             int64_t skipped) {
  LogWindow w = LogWindow::empty(device, skipped);
  if (!meta.is_object() || meta.value("world_size", 0) != world_size || !meta.contains("loss_sums") ||
      !meta["loss_sums"].is_array() || meta["loss_sums"].size() != static_cast<size_t>(world_size)) {
    return w;
  }
  const nlohmann::json& sum = meta["loss_sums"][static_cast<size_t>(rank)];
  const float value = sum.is_number() ? sum.get<float>() : std::numeric_limits<float>::quiet_NaN();
  w.loss_sum.fill_(value);
  w.micro_batches = meta.value("micro_batches", int64_t{0});
  w.skipped_before = meta.value("skipped_before", skipped);
  return w;
}

}  // namespace fp8t::train
