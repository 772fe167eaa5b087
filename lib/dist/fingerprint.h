// One job, one configuration: before the first step every rank checks that the others train
// what it trains. Each rank describes its job as a list of items (the resolved config key by
// key, every data file by size and sampled content; lib/train/job_fingerprint.h builds it), and
// one small collective compares a 63-bit hash of each item across the ranks.
#pragma once

#include <c10/core/Device.h>  // c10::Device

#include <string>  // std::string
#include <vector>  // std::vector

#include "lib/dist/communicator.h"  // Communicator

namespace fp8t::dist {

struct FingerprintItem {
  std::string what;   // how the message names it: "config key train.lr", "file a.bin (data.train_path)"
  std::string value;  // this rank's value, as text
};

// FNV-1a, 64 bits: the same on every build and host (std::hash is not).
uint64_t fingerprint_hash(const std::string& text);

// Every rank calls it with its own items (two all-reduces of int64 tensors on `device`). Throws
// fp8t::Error (kBadInput) on every rank when the ranks hold different numbers of items, or at the
// first item whose hash differs between ranks, naming the item and this rank's value.
void check_same_on_every_rank(Communicator& comm, const c10::Device& device,
                              const std::vector<FingerprintItem>& items);

}  // namespace fp8t::dist
