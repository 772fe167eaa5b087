// Run folders written by hand for the report tests: the files fp8train writes, small.
#pragma once

#include <filesystem>  // std::filesystem::path
#include <fstream>     // std::ofstream
#include <string>      // std::string

namespace fp8t::test {

inline void write_file(const std::filesystem::path& p, const std::string& text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// A finished run: config.yaml with the given fp8 margin and lr, summary.json, three metrics rows
// (steps 10, 20 with FP8 statistics for two slots, then an eval row at step 20).
inline void write_run(const std::filesystem::path& dir, const std::string& name, int margin, const std::string& lr,
                      const std::string& status = "completed", double best_val = 2.5) {
  write_file(dir / "config.yaml", "precision: fp8\nrun:\n  name: " + name + "\n  out_dir: runs\nfp8:\n  margin: " +
                                      std::to_string(margin) + "\n  override_linear_precision: [0, 0, 1]\ntrain:\n  lr: " +
                                      lr + "\n  steps: 20\n");
  write_file(dir / "summary.json",
             "{\"status\": \"" + status + "\", \"run\": \"" + name + "\", \"steps\": 20, \"final_loss\": 2.25, "
             "\"final_val_loss\": " + std::to_string(best_val) + ", \"best_val_loss\": " + std::to_string(best_val) +
             ", \"tokens_per_s\": 45210.0, \"peak_memory_bytes\": 104857600, \"fp8_worst\": {\"most_saturated\": "
             "[{\"slot\": \"h0.fc1.input\", \"fraction\": 0.125}], \"most_underflow\": [{\"slot\": \"h0.fc2.grad\", "
             "\"fraction\": 0.5}]}}\n");
  const std::string fp8 = "[{\"slot\":\"h0.fc1.input\",\"format\":\"E4M3\",\"amax\":3.0,\"scale\":64.0,"
                          "\"saturated\":0.125,\"underflow\":0.0},{\"slot\":\"h0.fc2.grad\",\"format\":\"E5M2\","
                          "\"amax\":0.001,\"scale\":4096.0,\"saturated\":0.0,\"underflow\":0.5}]";
  write_file(dir / "metrics.jsonl",
             "{\"step\":10,\"loss\":3.5,\"lr\":0.001,\"grad_norm\":1.5,\"tokens_per_s\":40000.0,\"elapsed_s\":1.0,"
             "\"fp8\":" + fp8 + "}\n"
             "{\"step\":20,\"loss\":2.25,\"lr\":0.0005,\"grad_norm\":null,\"tokens_per_s\":50000.0,\"elapsed_s\":2.0,"
             "\"fp8\":" + fp8 + "}\n"
             "{\"step\":20,\"val_loss\":" + std::to_string(best_val) + ",\"elapsed_s\":2.5}\n");
}

}  // namespace fp8t::test
