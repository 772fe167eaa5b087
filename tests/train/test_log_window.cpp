// lib/train/log_window.*: the log window a checkpoint carries, written and restored on one process,
// and refused back to empty for another number of ranks or an old checkpoint without it.
#include "lib/train/log_window.h"

#include <nlohmann/json.hpp>  // nlohmann::json

#include "tests/catch.h"

using namespace fp8t::train;

TEST_CASE("log window: a checkpoint's window restores the same sums on the same ranks", "[train]") {
  LogWindow w = LogWindow::empty(at::kCPU, /*skipped=*/2);
  CHECK(w.loss_sum.item<float>() == 0.0f);
  CHECK(w.skipped_before == 2);
  w.loss_sum += 7.25f;
  w.micro_batches = 6;
  const nlohmann::json meta = log_window_meta(w, /*comm=*/nullptr, /*rank=*/0, /*world_size=*/1);
  CHECK(meta["world_size"] == 1);
  CHECK(meta["micro_batches"] == 6);
  const LogWindow back = restore_log_window(meta, 0, 1, at::kCPU, /*skipped=*/2);
  CHECK(back.loss_sum.item<float>() == 7.25f);  // exactly: the same float
  CHECK(back.micro_batches == 6);
  CHECK(back.skipped_before == 2);
  w.reset(3);
  CHECK(w.loss_sum.item<float>() == 0.0f);
  CHECK(w.micro_batches == 0);
  CHECK(w.skipped_before == 3);
}

TEST_CASE("log window: another number of ranks, or no window, starts empty", "[train]") {
  LogWindow w = LogWindow::empty(at::kCPU, 0);
  w.loss_sum += 3.0f;
  w.micro_batches = 4;
  const nlohmann::json meta = log_window_meta(w, nullptr, 0, 1);
  const LogWindow other = restore_log_window(meta, 0, 2, at::kCPU, /*skipped=*/5);
  CHECK(other.loss_sum.item<float>() == 0.0f);
  CHECK(other.micro_batches == 0);
  CHECK(other.skipped_before == 5);
  const LogWindow none = restore_log_window(nlohmann::json(), 0, 1, at::kCPU, 1);
  CHECK(none.micro_batches == 0);
  CHECK(none.skipped_before == 1);
}
