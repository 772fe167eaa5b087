#include "lib/dist/fingerprint.h"

#include <ATen/ATen.h>  // at::empty, at::tensor

#include <cstdint>  // int64_t, uint64_t

#include "lib/util/error.h"  // FP8T_INPUT_CHECK, FP8T_THROW

namespace fp8t::dist {
namespace {

// [x..., -x...] reduced with MAX holds every value's maximum and minus its minimum over the
// ranks: one collective gives both.
std::vector<int64_t> max_and_negated_min(Communicator& comm, const c10::Device& device,
                                         const std::vector<int64_t>& values) {
  std::vector<int64_t> both(values);
  for (int64_t v : values) both.push_back(-v);
  at::Tensor t = at::tensor(both, at::kLong).to(device);
  comm.all_reduce(t, ReduceOp::kMax);
  const at::Tensor host = t.cpu();
  return std::vector<int64_t>(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + host.numel());
}

}  // namespace

uint64_t fingerprint_hash(const std::string& text) {
  uint64_t h = 14695981039346656037ull;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

void check_same_on_every_rank(Communicator& comm, const c10::Device& device,
                              const std::vector<FingerprintItem>& items) {
  const int64_t n = static_cast<int64_t>(items.size());
  const std::vector<int64_t> count = max_and_negated_min(comm, device, {n});
  if (count[0] != -count[1]) {
    std::string files;
    for (const FingerprintItem& item : items) {
      if (item.what.rfind("config key ", 0) == 0) continue;
      files += "\n  ";
      files += item.what;
      files += ": ";
      files += item.value;
    }
    FP8T_THROW(ExitCode::kBadInput, "the ranks of this job do not train the same thing: rank ", comm.rank(), " has ",
               n, " config keys and data files, another rank ", (n == count[0] ? -count[1] : count[0]),
               "; every rank must be given the same config and see the same data files. This rank's files:",
               files.empty() ? std::string(" none") : files);
  }
  std::vector<int64_t> hashes;
  for (const FingerprintItem& item : items) {
    // 63 bits, so that negating never overflows.
    hashes.push_back(static_cast<int64_t>(fingerprint_hash(item.what + '\0' + item.value) >> 1));
  }
  const std::vector<int64_t> seen = max_and_negated_min(comm, device, hashes);
  for (int64_t i = 0; i < n; ++i) {
    FP8T_INPUT_CHECK(seen[i] == -seen[n + i], items[i].what, " differs between the ranks of this job (rank ",
                     comm.rank(), ": ", items[i].value, "); every rank must be given the same config and see the "
                     "same data files");
  }
}

}  // namespace fp8t::dist
