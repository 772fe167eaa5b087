// GEMM autotuning (train.gemm_autotune): which of the cuBLASLt heuristic's candidate algorithms a
// problem keeps, given their measured times. The timing itself is the engine's
// (lib/gemm/gemm_engine.cpp): each candidate runs on the problem's own operands on the first use
// of its plan, outside CUDA-graph capture.
//
// Why a margin: the heuristic's first choice is kept unless another candidate is clearly faster,
// so that timing noise (about 1% between repeats of one GEMM) rarely changes the algorithm, and
// with it the accumulation order and the bits of the result, from one run to the next.
#pragma once

#include <string>  // std::string
#include <vector>  // std::vector

namespace fp8t {
namespace gemm {

constexpr int kAutotuneCandidates = 8;     // the heuristic's first N algorithms are timed
constexpr int kAutotuneRepeats = 5;        // timed runs per candidate (after one untimed run)
constexpr double kAutotuneMargin = 0.03;   // another candidate must be 3% faster than the first

// One candidate's time: rank in the heuristic's order (0 = its first choice), ms per run (< 0:
// the candidate failed to run and is never chosen).
struct CandidateTime {
  int rank = 0;
  double ms = -1.0;
};

// The rank to keep: the fastest candidate when it beats rank 0 by more than `margin` (a
// fraction of rank 0's time), else 0; 0 when rank 0 failed and no other ran either.
int pick_candidate(const std::vector<CandidateTime>& times, double margin = kAutotuneMargin);

// What the tuner chose for one problem (GemmEngine::tuning_log).
struct TuneRecord {
  std::string problem;   // describe(problem)
  double heuristic_ms;   // the heuristic's first choice
  double chosen_ms;      // the kept candidate
  int chosen_rank;       // its rank (0: the heuristic's first choice was kept)
  int candidates;        // how many were timed
};

}  // namespace gemm
}  // namespace fp8t
