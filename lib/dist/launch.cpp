#include "lib/dist/launch.h"

#include <cerrno>   // errno
#include <cstdlib>  // std::getenv, std::strtol
#include <sstream>  // std::ostringstream

#include "lib/util/error.h"  // FP8T_INPUT_CHECK

namespace fp8t::dist {

namespace {

int parse_int(const std::map<std::string, std::string>& env, const std::string& name, int fallback,
              bool* present = nullptr) {
  const auto it = env.find(name);
  if (present) *present = it != env.end() && !it->second.empty();
  if (it == env.end() || it->second.empty()) return fallback;
  const std::string& text = it->second;
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text.c_str(), &end, 10);
  FP8T_INPUT_CHECK(errno == 0 && end != text.c_str() && *end == '\0' && value >= 0 && value <= 1 << 30,
                   "environment variable ", name, "='", text, "' is not a non-negative integer");
  return static_cast<int>(value);
}

}  // namespace

std::string LaunchInfo::describe() const {
  if (!launched) return "single process";
  std::ostringstream s;
  s << "rank " << rank << "/" << world_size << " (local " << local_rank << "), store " << master_addr << ":"
    << master_port << (agent_store ? " (launcher's store)" : "");
  return s.str();
}

LaunchInfo parse_launch_env(const std::map<std::string, std::string>& env) {
  LaunchInfo info;
  bool have_world = false;
  bool have_rank = false;
  info.world_size = parse_int(env, "WORLD_SIZE", 1, &have_world);
  if (!have_world) {
    // A lone RANK without WORLD_SIZE is almost certainly a broken launch script.
    parse_int(env, "RANK", 0, &have_rank);
    FP8T_INPUT_CHECK(!have_rank, "environment variable RANK is set but WORLD_SIZE is not: set both (torchrun does) "
                     "or neither (single process)");
    return info;
  }
  info.launched = true;
  FP8T_INPUT_CHECK(info.world_size >= 1, "environment variable WORLD_SIZE=", info.world_size, " must be at least 1");
  info.rank = parse_int(env, "RANK", 0, &have_rank);
  FP8T_INPUT_CHECK(have_rank || info.world_size == 1, "environment variable WORLD_SIZE=", info.world_size,
                   " is set but RANK is not");
  FP8T_INPUT_CHECK(info.rank < info.world_size, "environment variable RANK=", info.rank,
                   " is not below WORLD_SIZE=", info.world_size);
  info.local_rank = parse_int(env, "LOCAL_RANK", info.rank);
  info.local_world_size = parse_int(env, "LOCAL_WORLD_SIZE", info.world_size);
  FP8T_INPUT_CHECK(info.local_world_size >= 1 && info.local_world_size <= info.world_size,
                   "environment variable LOCAL_WORLD_SIZE=", info.local_world_size, " must be in [1, WORLD_SIZE=",
                   info.world_size, "]");
  const auto addr = env.find("MASTER_ADDR");
  if (addr != env.end() && !addr->second.empty()) info.master_addr = addr->second;
  bool have_port = false;
  info.master_port = parse_int(env, "MASTER_PORT", 29500, &have_port);
  FP8T_INPUT_CHECK(info.master_port >= 1 && info.master_port <= 65535, "environment variable MASTER_PORT=",
                   info.master_port, " is not a TCP port");
  FP8T_INPUT_CHECK(have_port || info.world_size == 1, "environment variable MASTER_PORT is not set (WORLD_SIZE=",
                   info.world_size, "): launch with torchrun or set MASTER_ADDR and MASTER_PORT");
  const auto agent = env.find("TORCHELASTIC_USE_AGENT_STORE");
  info.agent_store = agent != env.end() && agent->second == "True";
  info.restart_count = parse_int(env, "TORCHELASTIC_RESTART_COUNT", 0);
  return info;
}

LaunchInfo launch_info_from_environment() {
  std::map<std::string, std::string> env;
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                           "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT"}) {
    if (const char* v = std::getenv(name)) env[name] = v;
  }
  return parse_launch_env(env);
}

}  // namespace fp8t::dist
