// Where this process sits in a data-parallel job, read from the environment that torchrun
// (or any launcher that follows its conventions) sets for each worker:
//
//   RANK, WORLD_SIZE    global rank and number of processes
//   LOCAL_RANK          rank on this node: the CUDA device the process uses
//   LOCAL_WORLD_SIZE    processes on this node (hybrid sharding's default group, dist.shard_group_size -1)
//   MASTER_ADDR/PORT    the TCP store that the processes meet at
//   TORCHELASTIC_USE_AGENT_STORE, TORCHELASTIC_RESTART_COUNT
//                       torchrun's own agent already serves the store on MASTER_PORT; every
//                       worker then connects as a client under "/worker/attempt_<count>"
//
// Without WORLD_SIZE the process runs alone and nothing here is used.
#pragma once

#include <map>     // std::map
#include <string>  // std::string

namespace fp8t::dist {

struct LaunchInfo {
  bool launched = false;  // WORLD_SIZE was set: join a process group (even of size 1)
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;  // LOCAL_WORLD_SIZE; WORLD_SIZE when unset (one node)
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool agent_store = false;  // torchrun's agent hosts the store (all workers are clients)
  int restart_count = 0;

  bool is_main() const { return rank == 0; }
  // "rank 1/4 (local 1), store 10.0.0.1:29500" or "single process".
  std::string describe() const;
};

// Parses `env` (variable -> value). A malformed or inconsistent value throws fp8t::Error
// (kBadInput) naming the variable, e.g. "RANK=3 is not below WORLD_SIZE=2".
LaunchInfo parse_launch_env(const std::map<std::string, std::string>& env);

// parse_launch_env over this process's environment.
LaunchInfo launch_info_from_environment();

}  // namespace fp8t::dist
