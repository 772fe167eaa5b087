#include "lib/gemm/gemm_autotune.h"

namespace fp8t {
namespace gemm {

int pick_candidate(const std::vector<CandidateTime>& times, double margin) {
  if (times.empty()) return 0;
  int best = -1;
  for (size_t i = 0; i < times.size(); ++i) {
    if (times[i].ms < 0) continue;
    if (best < 0 || times[i].ms < times[best].ms) best = static_cast<int>(i);
  }
  if (best < 0) return 0;
  const double first = times[0].ms;
  if (first < 0) return times[best].rank;  // the first choice did not run: the fastest that did
  return times[best].ms < first * (1.0 - margin) ? times[best].rank : 0;
}

}  // namespace gemm
}  // namespace fp8t
