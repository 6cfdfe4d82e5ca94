#include "trainer/config/dist_env.h"

#include <charconv>
#include <cstdlib>

#include "common/core/error.h"

namespace zlm::trainer {

namespace {

int env_int(const GetEnv& getenv, const char* name, int fallback) {
  const char* v = getenv(name);
  if (!v || !*v) return fallback;
  int out = 0;
  std::string s(v);
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc() || p != s.data() + s.size() || out < 0)
    throw Error(ErrorKind::Usage, "environment variable %s='%s' is not a non-negative integer", name, v);
  return out;
}

std::string env_str(const GetEnv& getenv, const char* name) {
  const char* v = getenv(name);
  return v ? std::string(v) : std::string();
}

}  // namespace

std::string slurm_first_host(const std::string& nodelist) {
  // The first comma outside brackets ends the first entry.
  size_t depth = 0, end = nodelist.size();
  for (size_t i = 0; i < nodelist.size(); ++i) {
    if (nodelist[i] == '[') ++depth;
    else if (nodelist[i] == ']' && depth > 0) --depth;
    else if (nodelist[i] == ',' && depth == 0) {
      end = i;
      break;
    }
  }
  const std::string first = nodelist.substr(0, end);
  if (first.empty()) throw Error(ErrorKind::Usage, "SLURM_JOB_NODELIST '%s' names no host", nodelist.c_str());
  // Every bracketed range contributes its first value ("rack[3-4]-n[1-2]" -> "rack3-n1").
  std::string host;
  for (size_t i = 0; i < first.size();) {
    size_t open = first.find('[', i);
    if (open == std::string::npos) {
      host += first.substr(i);
      break;
    }
    size_t close = first.find(']', open);
    if (close == std::string::npos) throw Error(ErrorKind::Usage, "SLURM_JOB_NODELIST '%s': unbalanced '['", nodelist.c_str());
    std::string range = first.substr(open + 1, close - open - 1);
    host += first.substr(i, open - i) + range.substr(0, range.find_first_of(",-"));
    i = close + 1;
  }
  return host;
}

int slurm_tasks_on_node(const std::string& list, int node) {
  // "2(x3),1": 2 tasks on each of nodes 0-2, 1 on node 3.
  auto bad = [&]() { return Error(ErrorKind::Usage, "Slurm tasks-per-node list '%s' is malformed", list.c_str()); };
  int seen = 0;
  for (size_t i = 0; i < list.size();) {
    size_t end = list.find(',', i);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(i, end - i);
    int tasks = 0, repeat = 1;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), tasks);
    if (ec != std::errc() || tasks < 1) throw bad();
    if (p != item.data() + item.size()) {
      if (item.size() < 4 || item.compare(static_cast<size_t>(p - item.data()), 2, "(x") != 0 || item.back() != ')') throw bad();
      auto [q, ec2] = std::from_chars(p + 2, item.data() + item.size() - 1, repeat);
      if (ec2 != std::errc() || q != item.data() + item.size() - 1 || repeat < 1) throw bad();
    }
    if (node < seen + repeat) return tasks;
    seen += repeat;
    i = end + 1;
  }
  throw Error(ErrorKind::Usage, "Slurm tasks-per-node list '%s' has no entry for node %d (SLURM_NODEID)", list.c_str(), node);
}

namespace {

void from_torchrun(DistEnv& e, const GetEnv& getenv) {
  e.launcher = "torchrun";
  e.rank = env_int(getenv, "RANK", 0);
  e.world_size = env_int(getenv, "WORLD_SIZE", 1);
  e.local_rank = env_int(getenv, "LOCAL_RANK", 0);
  e.local_world_size = env_int(getenv, "LOCAL_WORLD_SIZE", e.world_size);
  e.agent_store = env_str(getenv, "TORCHELASTIC_USE_AGENT_STORE") == "True";
  e.restart_count = env_int(getenv, "TORCHELASTIC_RESTART_COUNT", 0);
}

// Returns whether the job may span hosts whose first one is known (rank 0's).
bool from_slurm(DistEnv& e, const GetEnv& getenv) {
  e.launcher = "slurm";
  e.rank = env_int(getenv, "SLURM_PROCID", 0);
  e.world_size = env_int(getenv, "SLURM_NTASKS", 1);
  e.local_rank = env_int(getenv, "SLURM_LOCALID", 0);
  // Tasks on this node: srun's per-step list, else the job's (both "2(x3),1",
  // indexed by SLURM_NODEID), else --ntasks-per-node, else one node's worth.
  const int node = env_int(getenv, "SLURM_NODEID", 0);
  std::string per_node = env_str(getenv, "SLURM_STEP_TASKS_PER_NODE");
  if (per_node.empty()) per_node = env_str(getenv, "SLURM_TASKS_PER_NODE");
  if (!per_node.empty()) {
    e.local_world_size = slurm_tasks_on_node(per_node, node);
  } else if (getenv("SLURM_NTASKS_PER_NODE")) {
    e.local_world_size = env_int(getenv, "SLURM_NTASKS_PER_NODE", 1);
  } else {
    const int nodes = env_int(getenv, "SLURM_STEP_NUM_NODES", env_int(getenv, "SLURM_NNODES", 1));
    e.local_world_size = nodes <= 1 ? e.world_size : (e.world_size + nodes - 1) / nodes;
  }
  if (getenv("MASTER_ADDR")) return true;
  std::string nodes = env_str(getenv, "SLURM_JOB_NODELIST");
  if (nodes.empty()) nodes = env_str(getenv, "SLURM_NODELIST");
  if (nodes.empty()) return false;
  e.master_addr = slurm_first_host(nodes);
  return true;
}

// MPI launchers: the same four numbers under each implementation's names.
void from_mpi(DistEnv& e, const GetEnv& getenv) {
  struct Names {
    const char *launcher, *rank, *size, *local_rank, *local_size;
  };
  static const Names kMpi[] = {
      {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"}};
  for (const Names& n : kMpi) {
    if (!getenv(n.rank) || !getenv(n.size)) continue;
    e.launcher = n.launcher;
    e.rank = env_int(getenv, n.rank, 0);
    e.world_size = env_int(getenv, n.size, 1);
    e.local_rank = env_int(getenv, n.local_rank, 0);
    e.local_world_size = env_int(getenv, n.local_size, e.world_size);
    return;
  }
}

void check(const DistEnv& e, const GetEnv& getenv, bool multi_host_possible) {
  if (e.master_port == 0 || e.master_port > 65535) throw Error(ErrorKind::Usage, "MASTER_PORT=%d is not a port number", e.master_port);
  if (e.world_size < 1) throw Error(ErrorKind::Usage, "%s: the world size must be at least 1", e.launcher.c_str());
  if (e.rank >= e.world_size)
    throw Error(ErrorKind::Usage, "%s: rank %d is outside a world of %d processes", e.launcher.c_str(), e.rank, e.world_size);
  if (e.local_world_size < 1 || e.local_rank >= e.local_world_size)
    throw Error(ErrorKind::Usage, "%s: local rank %d is outside %d local processes", e.launcher.c_str(), e.local_rank,
                e.local_world_size);
  // Several hosts need to know where rank 0 is; on one host loopback is right.
  if (e.world_size > e.local_world_size && !getenv("MASTER_ADDR") && (e.launcher != "slurm" || !multi_host_possible))
    throw Error(ErrorKind::Usage, "%s: %d processes on several hosts need MASTER_ADDR (rank 0's host)", e.launcher.c_str(),
                e.world_size);
}

// Only the launcher's own id: a Slurm id seen by ranks that torchrun started on
// hosts outside the allocation would differ between them.
std::string job_id_from(const GetEnv& getenv, const std::string& launcher) {
  if (std::string id = env_str(getenv, "ZLM_JOB_ID"); !id.empty()) return id;
  if (launcher == "torchrun") {
    const std::string id = env_str(getenv, "TORCHELASTIC_RUN_ID");
    return id.empty() || id == "none" ? "" : "torchrun:" + id;
  }
  if (launcher == "slurm" && !env_str(getenv, "SLURM_JOB_ID").empty())
    return "slurm:" + env_str(getenv, "SLURM_JOB_ID") + "." + env_str(getenv, "SLURM_STEP_ID");
  if (launcher == "openmpi") return env_str(getenv, "OMPI_MCA_ess_base_jobid").empty() ? "" : "openmpi:" + env_str(getenv, "OMPI_MCA_ess_base_jobid");
  return "";
}

}  // namespace

DistEnv dist_env_from(const GetEnv& getenv) {
  DistEnv e;
  bool multi_host_possible = true;
  if (getenv("RANK") && getenv("WORLD_SIZE")) from_torchrun(e, getenv);
  else if (getenv("SLURM_PROCID") && getenv("SLURM_NTASKS")) multi_host_possible = from_slurm(e, getenv);
  else from_mpi(e, getenv);
  e.job_id = job_id_from(getenv, e.launcher);
  if (const char* by = getenv("ZLM_LAUNCHER"); by && *by && e.launcher == "torchrun") e.launcher = by;
  if (const char* addr = getenv("MASTER_ADDR"); addr && *addr) e.master_addr = addr;
  e.master_port = env_int(getenv, "MASTER_PORT", 29500);
  if (e.rank == 0) e.store_listen_fd = env_int(getenv, "ZLM_STORE_LISTEN_FD", -1);
  check(e, getenv, multi_host_possible);
  return e;
}

DistEnv dist_env_from_process() {
  return dist_env_from([](const char* name) -> const char* { return std::getenv(name); });
}

}  // namespace zlm::trainer
